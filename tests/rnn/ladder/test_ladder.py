"""Lesson 3's ladder: every step reproduces torch.nn.LSTM (checked in float64), validation, graphs on a GPU."""

import copy

import pytest
import torch

from gpulab import check, runtime
from gpulab.rnn import from_torch_lstm, ladder

STEPS = sorted(ladder.STEPS)

# (layers, hidden, input, batch, seq, batch_first): 1-4 layers, hidden 100 and 257, batch 1, sequence 1. Every step
# is one launch per layer and time step in the interpreter, so layers x seq stays small; float16 on three of them.
CASES = [
    (1, 100, 100, 1, 1, False),
    (2, 257, 31, 1, 2, True),
    (3, 5, 4, 3, 1, False),
    (4, 8, 6, 2, 2, False),
    (2, 16, 16, 3, 3, True),
]
DTYPE_CASES = [(c, torch.float32) for c in CASES] + [(c, torch.float16) for c in CASES[:3]]


def _module(layers, hidden, inp, batch_first, seed=0):
    torch.manual_seed(seed)
    return torch.nn.LSTM(inp, hidden, num_layers=layers, batch_first=batch_first).eval()


def _reference(m, x, state):
    with torch.no_grad():
        return copy.deepcopy(m).double()(x.double(), tuple(s.double() for s in state) if state else None)


def _assert_matches(out, ref, dtype, context):
    ladder._check(out, ref, dtype, context)
    check.assert_close(out[1][1], ref[1][1], dtype=dtype, name="c_n dtype")
    assert out[1][1].dtype == dtype and out[0].dtype == dtype


@pytest.mark.parametrize(
    "case,dtype",
    DTYPE_CASES,
    ids=lambda v: "L{}-H{}-I{}-B{}-T{}{}".format(*v[:5], "-bf" if v[5] else "") if isinstance(v, tuple) else str(v)[6:],
)
def test_every_step_matches_nn_lstm(case, dtype):
    layers, hidden, inp, batch, seq, bf = case
    m = _module(layers, hidden, inp, bf)
    shape = (batch, seq, inp) if bf else (seq, batch, inp)
    x = check.random_tensor(shape, dtype=torch.float32, device="cpu")
    state = (
        check.random_tensor(layers, batch, hidden, device="cpu"),
        check.random_tensor(layers, batch, hidden, device="cpu"),
    )
    if dtype == torch.float16:  # the reference sees the same rounded inputs and weights
        m, x, state = m.half().float(), x.half().float(), tuple(s.half().float() for s in state)
    ref = _reference(m, x, state)
    w = from_torch_lstm(m.to(runtime.device), dtype=dtype)
    xd, sd = x.to(runtime.device, dtype), tuple(s.to(runtime.device, dtype) for s in state)
    for n in STEPS:
        _assert_matches(ladder.run_step(n, xd, w, sd), ref, dtype, f"step {n}, {case}")


def test_zero_state_and_reference():
    m = _module(2, 12, 7, False)
    x = check.random_tensor(3, 2, 7, device="cpu")
    ref = _reference(m, x, None)
    w = from_torch_lstm(m.to(runtime.device))
    check.assert_close(ladder.lstm_reference(x.to(runtime.device), w)[0], ref[0], rtol=1e-6)  # bias rounded once
    for n in (0, 6):
        _assert_matches(ladder.run_step(n, x.to(runtime.device), w), ref, torch.float32, f"step {n}")


def test_validation_errors():
    m = _module(2, 8, 5, False).to(runtime.device)
    w = from_torch_lstm(m)
    x = check.random_tensor(3, 2, 5)
    with pytest.raises(ValueError, match="input size 4.*expected 5"):
        ladder.step1_combined_gemm(check.random_tensor(3, 2, 4), w)
    with pytest.raises(ValueError, match="rank 3"):
        ladder.step6_wavefront(x[0], w)
    with pytest.raises(ValueError, match="x is torch.float16 but the weights are torch.float32"):
        ladder.step3_fused_pointwise(x.half(), w)
    with pytest.raises(ValueError, match="weights must be gpulab.rnn.LSTMWeights"):
        ladder.step0_baseline(x, m)
    with pytest.raises(ValueError, match="h0 must be"):
        ladder.step5_combined_input_gemm(x, w, (torch.zeros(1, 2, 8), torch.zeros(2, 2, 8)))
    with pytest.raises(ValueError, match="not a ladder step"):
        ladder.run_step(9, x, w)
    with pytest.raises(ValueError, match="at least one time step"):
        ladder.step4_pretransposed(x[:0], w)
    if not runtime.on_gpu():
        with pytest.raises(ValueError, match="bfloat16"):
            ladder.step7_wavefront_concat(x.bfloat16(), w.to(dtype=torch.bfloat16))


def test_no_tf32_restores_flags():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with ladder.no_tf32():
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_steps_table_and_cpu_graphs():
    assert sorted(ladder.STEPS) == list(range(9)) and ladder.BEYOND_ARTICLE == (7, 8)
    if not runtime.on_gpu():
        assert ladder.capture(lambda: None) is None


def test_benchmark_cpu_tables(capsys):
    if runtime.on_gpu():
        pytest.skip("the GPU benchmark is `python -m gpulab bench 03`")
    results, fig = ladder.benchmark(dtypes=[torch.float32], steps=[0, 6])
    assert {r.params["step"] for r in results} == {0, 6, "cuDNN"}
    assert all(r.params["check"] == "ok" and r.params["mode"] == "eager" for r in results)
    assert all(r.case == r.provider and r.params["benchmark"] == "lstm ladder" for r in results)  # one harness run
    text = ladder.ladder_table(results)
    assert "interpreter" in text and "cuDNN" in text
    assert fig.axes
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_ladder_benchmark_declares_graphed_providers_only_on_a_gpu():
    from gpulab.rnn.ladder.benchmark import ladder_benchmark  # not re-exported by the package

    b = ladder_benchmark([torch.float32], [0])
    graphed = [p for p in b.providers if p.endswith("(graph)")]
    assert len(graphed) == (2 if runtime.on_gpu() else 0)
    assert b.provider_params["cuDNN (nn.LSTM)"] == {"step": "cuDNN", "mode": "eager", "beyond": False}


def test_same_mode_reads_eager_on_wall_clock_and_graphed_on_device_time():
    from gpulab.bench import Result

    def rec(step, mode, ms, wall_ms):
        params = {"step": step, "mode": mode}
        return Result(lesson="03", case=f"step {step}", ms=ms, wall_ms=wall_ms, dtype="float32", params=params)

    recs = [rec(6, "eager", 5.0, 20.0), rec("cuDNN", "eager", 4.0, 10.0), rec(8, "graph", 2.0, None)]
    recs += [rec("cuDNN", "graph", 3.0, None)]
    assert [ladder.mode_ms(r) for r in recs] == [20.0, 10.0, 2.0, 3.0]
    assert ladder.mode_ms(rec(6, "eager", 5.0, None)) == 5.0  # a record without a wall time: its device time
    lines = ladder.same_mode_summary(recs).splitlines()
    assert lines[0] == ladder.SAME_MODE_CLOCKS
    assert "eager (wall clock): best step 6  20.00 ms, cuDNN  10.00 ms: 0.50x" in lines[1]
    assert "graph (device clock): best step 8   2.00 ms, cuDNN   3.00 ms: 1.50x" in lines[2]


# ----------------------------------------------------------------------------------------------------------------
# GPU self-test: the article's full size, every step, eager and captured, fp32 (no TF32), fp16, bf16.


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_full_size_every_step_and_graph(dtype):
    with ladder.no_tf32():
        m, w, x = ladder.make_problem(dtype, **{k: ladder.ARTICLE[k] for k in ("layers", "hidden", "batch", "seq")})
        with torch.no_grad():
            ref = copy.deepcopy(m).double()(x.double())
            for n in STEPS:
                ladder._check(ladder.run_step(n, x, w), ref, dtype, f"step {n} eager")
                g = ladder.capture(lambda n=n: ladder.run_step(n, x, w))
                ladder._check(g(), ref, dtype, f"step {n} graph")
                ladder._check(g(), ref, dtype, f"step {n} graph replay")
