"""Exercise 3, tasks 4 and 5: the ladder's streams step and CUDA-graph step, graded on CPU through
gpulab.course.fake_cuda. Right answers pass; each wrong answer is refused with the message that names its mistake
(the README's catalogue of common mistakes lists them)."""

import pytest
import torch

from gpulab.course import grading_ladder
from gpulab.course.fake_cuda import FakeCuda
from gpulab.rnn import ladder


def _step2(x, weights, state, cuda, mistake=None):
    n_l, (n_t, b, _) = weights.num_layers, x.shape
    h0, c0 = state
    main = cuda.current_stream()
    streams = [main] * n_l if mistake == "one stream" else [cuda.Stream() for _ in range(n_l)]
    for s in streams:
        if s is not main:
            s.wait_stream(main)
    ys = [x.new_empty(n_t, b, weights.hidden_size) for _ in range(n_l)]
    cs = [c0[layer] for layer in range(n_l)]
    done = [[None] * n_t for _ in range(n_l)]
    order = [(t, layer) for t in range(n_t) for layer in range(n_l)]
    if mistake == "whole layer":  # layer by layer, each waiting for the event after the whole layer below
        order = [(t, layer) for layer in range(n_l) for t in range(n_t)]
    for t, layer in order:
        s = streams[layer]
        with cuda.stream(s):
            if layer > 0 and mistake != "no wait":
                s.wait_event(done[layer - 1][-1 if mistake == "whole layer" else t])
            inp = x[t] if layer == 0 else ys[layer - 1][t]
            h = h0[layer] if t == 0 else ys[layer][t - 1]
            gates = inp @ weights.w_ih[layer].t() + h @ weights.w_hh[layer].t() + weights.bias[layer]
            h_new, cs[layer] = ladder.lstm_cell_torch(*gates.chunk(4, dim=1), cs[layer])
            ys[layer][t].copy_(h_new)
            done[layer][t] = cuda.Event()
            done[layer][t].record(s)
            if mistake == "synchronize":  # the host waits for every cell
                cuda.synchronize()
    if mistake != "no join":
        for s in streams:
            if s is not main:
                main.wait_stream(s)
    return ys[-1].clone(), (torch.stack([y[-1] for y in ys]), torch.stack(cs))


def test_fake_cuda_runs_a_missing_wait_late():
    """The fake runs the newest stream first: a wait left out shows as NaN, the same code with it does not."""
    fake = FakeCuda()
    a = torch.ones(3)
    with fake:
        side = fake.Stream()
        with fake.stream(fake.current_stream()):
            b = a * 2
        side.wait_stream(fake.current_stream())
        with fake.stream(side):
            c = b + 1
        d = b + 1  # default stream: in order
    fake.synchronize()
    assert torch.equal(c, torch.full((3,), 3.0)) and torch.equal(d, c)
    fake = FakeCuda()
    with fake:
        side = fake.Stream()
        b = a * 2
        with fake.stream(side):
            c = b + 1  # no wait: runs before b is computed
    fake.synchronize()
    assert torch.isnan(c).all()


def test_streams_pass(capsys):
    grading_ladder.grade_streams(_step2, cases=2)
    assert "PASSED step 2: streams and events" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("no wait", "must wait"),
        ("one stream", "ran on 1 stream"),
        ("whole layer", "serializes the layers"),
        ("no join", "join before returning"),
        ("synchronize", "synchronized"),
    ],
    ids=["no-wait", "one-stream", "wait-for-whole-layer", "no-join", "host-synchronize"],
)
def test_streams_wrong_methods_are_named(mistake, message):
    def answer(x, weights, state, cuda):
        return _step2(x, weights, state, cuda, mistake)

    with pytest.raises(AssertionError, match=message):
        grading_ladder.grade_streams(answer, cases=1)


def _graphed(fn, example, cuda, mistake=None):
    static_x = example.clone()
    if mistake != "no warm-up":
        s = cuda.Stream()
        s.wait_stream(cuda.current_stream())
        with cuda.stream(s):
            fn(static_x)
        cuda.current_stream().wait_stream(s)
    held = {}

    def capture():
        g = cuda.CUDAGraph()
        with cuda.graph(g):
            held["y"] = fn(static_x)
        held["g"] = g

    capture()

    def replay(x):
        if mistake == "eager":
            return fn(x)
        if mistake == "every call":
            capture()
        if mistake != "no copy":
            static_x.copy_(x)
        if mistake != "no replay":
            held["g"].replay()
        return held["y"]

    return replay


def test_graphed_passes(capsys):
    grading_ladder.grade_graphed(_graphed, cases=2)
    assert "PASSED CUDA graph" in capsys.readouterr().out


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("no warm-up", "no warm-up call before the capture"),
        ("no copy", "copy the new input into the captured one"),
        ("every call", "captured 3 times for 2 calls"),
        ("eager", "ran eagerly"),
        ("no replay", "call g.replay\\(\\) before returning"),
    ],
    ids=["no-warm-up", "no-copy", "capture-every-call", "eager", "no-replay"],
)
def test_graphed_wrong_methods_are_named(mistake, message):
    def answer(fn, example, cuda):
        return _graphed(fn, example, cuda, mistake)

    with pytest.raises(AssertionError, match=message):
        grading_ladder.grade_graphed(answer, cases=2)


def test_fake_cuda_refuses_what_torch_cuda_would():
    fake = FakeCuda()
    with pytest.raises(TypeError, match="s must be a stream"):
        with fake.stream("stream 1"):
            pass
    with pytest.raises(TypeError, match="g must be a cuda.CUDAGraph"):
        with fake.graph(None):
            pass
    with pytest.raises(ValueError, match="pass the stream"):
        fake.Event().record()
    with pytest.raises(RuntimeError, match="never captured"):
        fake.CUDAGraph().replay()
