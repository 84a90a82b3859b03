"""Wrong answers, one method at a time, for the graders whose own test files did not try them: each must be refused
with the message that names its mistake (the catalogue of common mistakes in the README lists them)."""

import pytest
import torch
import torch.distributed as dist
import triton
import triton.language as tl

from gpulab.course import grading_attention, grading_distributed, grading_ladder, grading_rnn, grading_tasks
from gpulab.rnn import cells, ladder

# ----------------------------------------------------------------------------------------------------------------
# exercise 3: step 1 of the ladder, the fused pointwise kernel


def _step1(x, weights, state=None, mistake=None):
    n_l, (n_t, b, _) = weights.num_layers, x.shape
    shape = (n_l, b, weights.hidden_size)
    h0, c0 = state if state is not None else (x.new_zeros(shape), x.new_zeros(shape))
    inp, h_n, c_n = x, [], []
    for layer in range(n_l):
        h, c, out = h0[layer], c0[layer], []
        w_ih, w_hh = weights.w_ih[layer], weights.w_hh[layer]
        for t in range(n_t):
            if mistake == "per gate":  # eight products per cell: four gates x two inputs
                parts = [inp[t] @ wi.t() + h @ wh.t() for wi, wh in zip(w_ih.chunk(4), w_hh.chunk(4))]
                gates = torch.cat(parts, 1) + weights.bias[layer]
            elif mistake == "elementwise":  # the products as broadcast multiply-and-sum, no GEMM at all
                gates = (inp[t][:, None, :] * w_ih).sum(-1) + (h[:, None, :] * w_hh).sum(-1) + weights.bias[layer]
            else:
                gates = inp[t] @ w_ih.t() + h @ w_hh.t() + weights.bias[layer]
            h, c = ladder.lstm_cell_torch(*gates.chunk(4, dim=1), c)
            out.append(h)
        inp = torch.stack(out)
        h_n.append(h)
        c_n.append(c)
    return inp, (torch.stack(h_n), torch.stack(c_n))


def _step1_library(x, weights, state=None):
    lstm = torch.nn.LSTM(x.shape[-1], weights.hidden_size, num_layers=weights.num_layers).to(x)
    with torch.no_grad():
        for layer in range(weights.num_layers):
            getattr(lstm, f"weight_ih_l{layer}").copy_(weights.w_ih[layer])
            getattr(lstm, f"weight_hh_l{layer}").copy_(weights.w_hh[layer])
            getattr(lstm, f"bias_ih_l{layer}").copy_(weights.bias[layer])
            getattr(lstm, f"bias_hh_l{layer}").zero_()
    return lstm(x, state)


def test_step1_passes_and_wrong_methods_are_named(capsys):
    grading_ladder.grade_combined_gemm(_step1, cases=2)
    assert capsys.readouterr().out.startswith("PASSED step 1: combined GEMMs")
    for answer, message in (
        (lambda x, w, s=None: _step1(x, w, s, "per gate"), "step 1 does 2 per cell"),
        (lambda x, w, s=None: _step1(x, w, s, "elementwise"), "run elementwise, not as a GEMM"),
        (_step1_library, "a library LSTM"),
    ):
        with pytest.raises(AssertionError, match=message):
            grading_ladder.grade_combined_gemm(answer, cases=2)


@triton.jit
def _pointwise(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK: tl.constexpr, MISTAKE: tl.constexpr):
    n = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M
    g = gates_ptr + n * 4 * M + offs
    i = tl.load(g, mask=mask).to(tl.float32)
    f = tl.load(g + M, mask=mask).to(tl.float32)
    z = tl.load(g + 2 * M, mask=mask).to(tl.float32)
    o = tl.load(g + 3 * M, mask=mask).to(tl.float32)
    if MISTAKE == "order":  # the gates read as i, f, o, z
        z, o = o, z
    c = tl.load(c_ptr + n * M + offs, mask=mask).to(tl.float32)
    h, c = cells.lstm_cell(i, f, z, o, c)
    store = offs < M + BLOCK if MISTAKE == "unmasked" else mask  # the last block's padding written too
    tl.store(h_out_ptr + n * M + offs, h.to(h_out_ptr.dtype.element_ty), mask=store)
    tl.store(c_out_ptr + n * M + offs, c, mask=store)


@triton.jit
def pointwise_order(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK: tl.constexpr):
    _pointwise(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK, "order")


@triton.jit
def pointwise_unmasked(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK: tl.constexpr):
    _pointwise(gates_ptr, c_ptr, h_out_ptr, c_out_ptr, M, BLOCK, "unmasked")


@pytest.mark.parametrize(
    "kernel, message",
    [(pointwise_order, "the order is i, f, z, o"), (pointwise_unmasked, "past the end|never written")],
    ids=["gate-order", "unmasked-store"],
)
def test_pointwise_wrong_answers_are_named(kernel, message):
    with pytest.raises(AssertionError, match=message):
        grading_ladder.grade_pointwise_kernel(kernel, cases=4)


# ----------------------------------------------------------------------------------------------------------------
# exercise 4: the online-softmax update


def _update_no_rescale(m, l, x):  # noqa: E741 - the paper's name
    m_new = torch.maximum(m, x.max(dim=1).values)
    ref = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new)
    return m_new, l + torch.exp(x - ref[:, None]).sum(dim=1)  # the old sum kept relative to the old max


def _update_no_guard(m, l, x):  # noqa: E741
    m_new = torch.maximum(m, x.max(dim=1).values)
    return m_new, l * torch.exp(m - m_new) + torch.exp(x - m_new[:, None]).sum(dim=1)


def _update_raw_exp(m, l, x):  # noqa: E741 - no max subtracted at all: exp overflows at values ~1e3
    return torch.maximum(m, x.max(dim=1).values), l + torch.exp(x).sum(dim=1)


@pytest.mark.parametrize(
    "answer, message",
    [(_update_no_rescale, "m \\+ log\\(l\\)|rescale"), (_update_no_guard, "NaN"), (_update_raw_exp, "log-sum-exp")],
    ids=["no-rescale", "no-nan-guard", "raw-exp"],
)
def test_online_update_wrong_answers_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_attention.grade_online_update(answer, cases=6)


# ----------------------------------------------------------------------------------------------------------------
# exercise 5: the LSTM backward step by autograd


def _step_autograd(i, f, z, o, c_prev, dh, dc, R):
    with torch.enable_grad():  # grad mode turned back on: still autograd
        g = torch.stack([torch.logit(i), torch.logit(f), torch.atanh(z), torch.logit(o)], 1).requires_grad_()
        i2, f2, o2 = (torch.sigmoid(g[:, k]) for k in (0, 1, 3))
        c = f2 * c_prev + i2 * torch.tanh(g[:, 2])
        h = o2 * torch.tanh(c)
        (dG,) = torch.autograd.grad((h * dh).sum() + (c * dc).sum(), g)
    return dG, torch.einsum("bgj,gjk->bk", dG, R), (dc + dh * o * (1 - torch.tanh(c.detach()) ** 2)) * f


def _step_func(i, f, z, o, c_prev, dh, dc, R):
    def cell(c_prev, pre):
        i2, f2, o2 = (torch.sigmoid(pre[:, k]) for k in (0, 1, 3))
        c = f2 * c_prev + i2 * torch.tanh(pre[:, 2])
        return o2 * torch.tanh(c), c

    pre = torch.stack([torch.logit(i), torch.logit(f), torch.atanh(z), torch.logit(o)], 1)
    dc_prev, dG = torch.func.vjp(cell, c_prev, pre)[1]((dh, dc))
    return dG, torch.einsum("bgj,gjk->bk", dG, R), dc_prev


@pytest.mark.parametrize(
    "answer, message",
    [(_step_autograd, "autograd|require grad"), (_step_func, "torch.func")],
    ids=["autograd-enable-grad", "torch-func"],
)
def test_lstm_backward_step_by_autograd_is_refused(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_rnn.grade_lstm_backward_step(answer, cases=2)


# ----------------------------------------------------------------------------------------------------------------
# exercise 6: the parity data and the evaluation loop


def _parity_whole(batch, length, generator=None):
    x = torch.randint(0, 2, (batch, length), generator=generator)
    return x, (x.sum(1, keepdim=True) % 2).expand(batch, length).clone()


def _parity_float(batch, length, generator=None):
    x = torch.randint(0, 2, (batch, length), generator=generator)
    return x, (torch.cumsum(x, 1) % 2).float()


def _parity_shifted(batch, length, generator=None):
    x = torch.randint(0, 2, (batch, length), generator=generator)
    y = torch.cumsum(x, 1) % 2
    return x, torch.cat([torch.zeros_like(y[:, :1]), y[:, :-1]], 1)


@pytest.mark.parametrize(
    "answer, message",
    [(_parity_whole, "running"), (_parity_float, "int64"), (_parity_shifted, "shifted by one")],
    ids=["whole-string", "float-labels", "shifted"],
)
def test_parity_wrong_answers_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_tasks.grade_parity(answer)


def _evaluate(model, task, length, samples=512, batch_size=256, seed=1234, mistake=None):
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    was_training = model.training
    if mistake != "train mode":
        model.eval()
    correct, seen = 0, 0
    with torch.no_grad():
        while seen < samples:
            b = min(batch_size, samples - seen)
            x, y = task.sample(b, length, generator=gen, device=device)
            if mistake == "every position":
                correct += float((model(x).argmax(-1) == y).float().mean()) * b
            else:
                correct += int((model(x)[:, -1].argmax(-1) == y[:, -1]).sum())
            seen += b
    model.train(was_training)
    return correct / seen


@pytest.mark.parametrize(
    "mistake, message",
    [("train mode", "training mode"), ("every position", "except at the last position")],
)
def test_evaluate_wrong_answers_are_named(mistake, message):
    with pytest.raises(AssertionError, match=message):
        grading_tasks.grade_evaluate(lambda *a, **k: _evaluate(*a, **k, mistake=mistake))


# ----------------------------------------------------------------------------------------------------------------
# exercise 7: the bytes of a ring all-reduce, gradients averaged by hand


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda g, n: (n - 1) / n * g, "one phase"),
        (lambda g, n: 2 * g, "not the whole buffer"),
        (lambda g, n: 2 * (n - 1) * g, "expected"),
    ],
    ids=["one-phase", "whole-buffer", "no-chunks"],
)
def test_ring_bytes_wrong_answers_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_distributed.grade_ring_bytes(answer)


def average_summed(model, world_size):
    for p in model.parameters():
        dist.all_reduce(p.grad)  # the sum, never divided


def average_a_copy(model, world_size):
    for p in model.parameters():
        g = p.grad.clone()
        dist.all_reduce(g)  # a copy reduced: p.grad unchanged
        g /= world_size


@pytest.mark.parametrize(
    "answer, message", [(average_summed, "times the right one"), (average_a_copy, "on p.grad itself, in place")]
)
def test_average_gradients_wrong_answers_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_distributed.grade_average_gradients(answer)


def _train_step(model, opt, x, y, mistake=None):
    logits = model(x)
    if mistake == "last only":
        loss = torch.nn.functional.cross_entropy(logits[:, -1], y[:, -1])
    else:
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    if mistake != "no zero_grad":
        opt.zero_grad()
    loss.backward()
    if mistake != "no step":
        opt.step()
    return loss if mistake == "tensor" else loss.item()


def test_train_step_passes(capsys):
    grading_tasks.grade_train_step(_train_step)
    assert capsys.readouterr().out.startswith("PASSED training step")


@pytest.mark.parametrize(
    "mistake, message",
    [
        ("last only", "last position only"),
        ("no zero_grad", "zero_grad"),
        ("no step", "optimizer.step"),
        ("tensor", "Python float"),
    ],
)
def test_train_step_wrong_methods_are_named(mistake, message):
    with pytest.raises(AssertionError, match=message):
        grading_tasks.grade_train_step(lambda *a: _train_step(*a, mistake=mistake))


def _wavefront(layers, steps):
    return [[(l, k - l) for l in range(max(0, k - steps + 1), min(layers, k + 1))] for k in range(layers + steps - 1)]


def test_wavefront_passes(capsys):
    grading_ladder.grade_wavefront(_wavefront)
    assert capsys.readouterr().out.startswith("PASSED wavefront schedule")


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda n_l, n_t: [[(l, t)] for l in range(n_l) for t in range(n_t)], "step 0's order"),
        (lambda n_l, n_t: [[(l, t) for l in range(n_l)] for t in range(n_t)], "its input from below"),
        (lambda n_l, n_t: [[(l, t) for t in range(n_t)] for l in range(n_l)], "its own layer's previous state"),
        (lambda n_l, n_t: [w[:-1] if len(w) > 1 else w for w in _wavefront(n_l, n_t)], "in no wave"),
    ],
    ids=["serial", "all-layers-per-step", "all-steps-per-layer", "range-off-by-one"],
)
def test_wavefront_wrong_methods_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_ladder.grade_wavefront(answer)


def _program(p, P, T, R_p, ex, mistake=None):
    units = slice(p * R_p.shape[0], (p + 1) * R_p.shape[0])
    for t in range(1, T + 1):
        if mistake == "store after barrier":
            h_prev = ex[t - 1].clone()
            yield
            ex[t, units] = torch.tanh(h_prev @ R_p.T)
            continue
        if mistake == "own units":
            h_prev = torch.zeros_like(ex[0])
            h_prev[units] = ex[t - 1, units]
        else:
            h_prev = ex[t - 1]
        ex[t, units] = torch.tanh(h_prev @ R_p.T)
        if mistake == "two barriers":
            yield
        if mistake != "no barrier":
            yield


def _no_barrier(p, P, T, R_p, ex):
    yield from _program(p, P, T, R_p, ex, "no barrier")
    yield  # one arrival at the end, as if the barrier were after the loop


def test_split_exchange_passes(capsys):
    grading_rnn.grade_split_exchange(_program)
    assert capsys.readouterr().out.startswith("PASSED split kernel: exchange and barrier")


@pytest.mark.parametrize(
    "answer, message",
    [
        (lambda *a: _program(*a, mistake="store after barrier"), "store your units of h_t into ex.t., THEN yield"),
        (_no_barrier, "barriers for"),
        (lambda *a: _program(*a, mistake="two barriers"), "one per step is enough"),
        (lambda *a: _program(*a, mistake="own units"), "OWN units"),
        (lambda p, P, T, R_p, ex: None, "must be a generator"),
    ],
    ids=["barrier-before-store", "no-barrier-per-step", "two-barriers", "own-units-only", "not-a-generator"],
)
def test_split_exchange_wrong_methods_are_named(answer, message):
    with pytest.raises(AssertionError, match=message):
        grading_rnn.grade_split_exchange(answer)
