"""Lesson 6: the two contenders (gpulab.tasks.models): RoPE, causality, the three attention paths agree."""

import itertools

import pytest
import torch

from gpulab import runtime, tasks


def test_rope_depends_on_relative_position_only():
    torch.manual_seed(0)
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64).expand(1, 1, 12, 8)
    k = torch.randn(1, 1, 1, 8, dtype=torch.float64).expand(1, 1, 12, 8)
    s = tasks.rope(q) @ tasks.rope(k).transpose(-1, -2)  # [12, 12], s[i, j] depends on i - j only
    for i, j in itertools.product(range(1, 12), repeat=2):
        assert torch.allclose(s[0, 0, i, j], s[0, 0, i - 1, j - 1])
    assert torch.allclose(tasks.rope(q).norm(dim=-1), q.norm(dim=-1)), "a rotation keeps norms"


@pytest.mark.parametrize("kind", ["LSTM", "Transformer"])
def test_models_are_causal(gen, small_models, kind):
    model = small_models("modsum5", num_layers=2)[kind].eval()
    x, _ = tasks.modular_sum(3, 11, generator=gen(5))
    x2 = x.clone()
    x2[:, 7:] = (x2[:, 7:] + 1) % 5  # change the future
    with torch.no_grad():
        a, b = model(x), model(x2)
    assert a.shape == (3, 11, 5)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6) and not torch.allclose(a[:, 7:], b[:, 7:])


def test_attention_paths_agree(gen):
    t = tasks.get_task("parity")
    x, _ = t(2, 9, generator=gen(6))
    outs = {}
    for attention in ("naive", "sdpa", "flash"):  # flash runs in Triton's interpreter on CPU: tiny sizes only
        torch.manual_seed(1)
        m = tasks.TransformerModel(t.vocab, t.classes, d_model=16, num_heads=2, num_layers=1, attention=attention)
        with torch.no_grad():
            outs[attention] = m.to(runtime.device)(x.to(runtime.device)).cpu()
    assert torch.allclose(outs["naive"], outs["sdpa"], atol=1e-5)
    assert torch.allclose(outs["naive"], outs["flash"], atol=1e-4)


def test_defaults_follow_the_device():
    assert tasks.default_attention() == ("flash" if runtime.on_gpu() else "naive")
    assert tasks.default_rnn_backend() == ("fused" if runtime.on_gpu() else "vanilla")


@pytest.mark.parametrize("like", ["LSTM", "Transformer"])
def test_a_floor_model_is_its_model_without_the_sequence_mixing(gen, like):
    """FloorModel keeps every weight of its model except the recurrence (the LSTM's R; the Transformer loses none:
    attention has no weights of its own), and moves nothing along the sequence: changing any other position leaves
    a position's logits exactly as they were, while its own token still matters."""
    t, d, heads = tasks.get_task("modsum5"), 16, 2
    floor = tasks.FloorModel(t.vocab, t.classes, d_model=d, num_layers=2, like=like).eval()
    if like == "LSTM":
        model = tasks.LSTMModel(t.vocab, t.classes, d_model=d, num_heads=heads, num_layers=2, backend="vanilla")
        recurrence = 2 * 4 * heads * (d // heads) ** 2  # per layer R [4, NH, DH, DH]
    else:
        model = tasks.TransformerModel(t.vocab, t.classes, d_model=d, num_heads=heads, num_layers=2, attention="naive")
        recurrence = 0
    assert tasks.count_parameters(model) - tasks.count_parameters(floor) == recurrence
    x, _ = t(3, 9, generator=gen(7))
    x2 = x.clone()
    x2[:, :4] = (x2[:, :4] + 1) % 5  # change the past
    x2[:, 5:] = (x2[:, 5:] + 2) % 5  # and the future of position 4
    with torch.no_grad():
        a, b = floor(x), floor(x2)
    assert a.shape == (3, 9, 5) and torch.isfinite(a).all()
    assert torch.equal(a[:, 4], b[:, 4]) and not torch.allclose(a[:, :4], b[:, :4])
    (floor(x).float().square().mean()).backward()  # every weight takes part
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in floor.parameters())


def test_the_torch_lstm_model_is_the_one_head_lstm_model_on_torch_nn_lstm(gen):
    """TorchLSTMModel computes what LSTMModel with one head computes, given the same weights (each mixer loads the
    other's nn.LSTM state_dict): its logits equal in float64."""
    t, d = tasks.get_task("parity"), 12
    ours = tasks.LSTMModel(t.vocab, t.classes, d_model=d, num_heads=1, num_layers=2, backend="vanilla").double()
    peer = tasks.TorchLSTMModel(t.vocab, t.classes, d_model=d, num_layers=2).double()
    assert tasks.count_parameters(peer) == tasks.count_parameters(ours)  # one head: nn.LSTM's parameters
    theirs = dict(peer.named_parameters())
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if ".mixer." not in name:
                p.copy_(theirs[name])
        for i, block in enumerate(ours.blocks):
            lstm = peer.blocks[i].mixer.lstm
            block.mixer.load_state_dict(lstm.state_dict())  # one head: nn.LSTM's state_dict
    x, _ = t(3, 7, generator=gen(8))
    with torch.no_grad():
        a, b = ours(x), peer(x)
    assert a.shape == b.shape == (3, 7, t.classes) and torch.isfinite(a).all()
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_the_torch_lstm_models_recurrence_in_half_keeps_the_rest_and_the_dtype_of_its_output(gen):
    """half_recurrence puts only the nn.LSTM weights in fp16; the layer casts its input to them and its output back,
    so the model still maps tokens to float32 logits close to the float32 model's."""
    t = tasks.get_task("parity")
    torch.manual_seed(0)
    model = tasks.TorchLSTMModel(t.vocab, t.classes, d_model=16, num_layers=1)
    x, _ = t(2, 5, generator=gen(9))
    with torch.no_grad():
        full = model(x)
        half = model.half_recurrence()(x)
    assert {p.dtype for n, p in model.named_parameters() if ".lstm." in n} == {torch.float16}
    assert {p.dtype for n, p in model.named_parameters() if ".lstm." not in n} == {torch.float32}
    assert half.dtype == torch.float32 and torch.allclose(half, full, atol=1e-2) and not torch.equal(half, full)
