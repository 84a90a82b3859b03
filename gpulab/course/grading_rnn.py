"""Graders for exercise 5 (the fused RNN): the GRU cell as a ``@triton.jit`` function, the time loop of a fused
LSTM forward kernel, all gates in one product (read from the TTIR), the LSTM backward step (autograd refused), the
shared-memory and R-byte counts, and the split kernel's exchange and barrier (run by :func:`phase_driver`).

Each runs the learner's code on fresh random sizes against float64 references and raises AssertionError with a
message that says what to fix. On success it prints one deterministic line (nbval compares it).

The GRU cell is graded through a small kernel owned by this module that takes the learner's ``@triton.jit``
function as a ``tl.constexpr`` argument and calls it on blocks of random pre-activations, so what is tested is the
learner's function, compiled (or interpreted) exactly as the fused kernels would call it.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import numbers
import random
import re
import warnings

import torch
import triton
import triton.language as tl

from gpulab import check, runtime
from gpulab.course import method, speed
from gpulab.course.grading import (
    check_gradients,
    check_number,
    fresh_rng,
    grader,
    require_callable,
    require_kernel,
)
from gpulab.rnn import cells
from gpulab.rnn.api import flashrnn
from gpulab.rnn.functions import get_function
from gpulab.rnn.fused import tiling

__all__ = [
    "grade_all_gates",
    "grade_gru_cell",
    "grade_lstm_loop",
    "grade_r_bytes",
    "gru_reference",
    "launch_lstm_kernel",
]


@triton.jit
def _apply_cell_kernel(g_ptr, r_ptr, z_ptr, n_ptr, h_ptr, out_ptr, N, CELL: tl.constexpr, BLOCK: tl.constexpr):
    """out = CELL(g, r, z, n, h) elementwise on fp32 blocks; CELL is the learner's ``@triton.jit`` function."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0)
    z = tl.load(z_ptr + offs, mask=mask, other=0.0)
    n = tl.load(n_ptr + offs, mask=mask, other=0.0)
    h = tl.load(h_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, CELL(g, r, z, n, h), mask=mask)


def gru_reference(g, r, z, n, h, variant="flashrnn"):
    """float64 GRU update in flashrnn's gate order (``variant='flashrnn'``), or a common mistake (for hints): g, r, z,
    n (the pre-activations) and h are tensors of one shape."""
    runtime.one_of("variant", variant, ("flashrnn", *_GRU_HINTS))
    for name, t in (("r", r), ("z", z), ("n", n), ("h", h)):
        runtime.same_shape("g", g, name, t)
    g, r, z, n, h = (t.double() for t in (g, r, z, n, h))
    rs, zs = torch.sigmoid(r), torch.sigmoid(z)
    if variant == "flashrnn":
        return zs * h + (1 - zs) * torch.tanh(n + rs * g)
    if variant == "z swapped":
        return (1 - zs) * h + zs * torch.tanh(n + rs * g)
    if variant == "reset outside tanh":
        return zs * h + (1 - zs) * (torch.tanh(n) + rs * g)
    if variant == "no reset sigmoid":
        return zs * h + (1 - zs) * torch.tanh(n + r * g)
    return z * h + (1 - z) * torch.tanh(n + rs * g)  # "no update sigmoid"


_GRU_HINTS = {
    "z swapped": "the update gate keeps the OLD state: h' = z' * h + (1 - z') * n' (z' = sigmoid(z)), not the reverse.",
    "reset outside tanh": "the reset gate acts inside the tanh: n' = tanh(n + r' * g), with r' = sigmoid(r).",
    "no reset sigmoid": "r is a pre-activation: use r' = sigmoid(r) in n' = tanh(n + r' * g).",
    "no update sigmoid": "z is a pre-activation: use z' = sigmoid(z) in h' = z' * h + (1 - z') * n'.",
}


def _calls_course_cell(fn) -> bool:
    """Whether the learner's function body just calls a ``gru_cell`` (e.g. gpulab.rnn.cells.gru_cell)."""
    try:
        src = inspect.getsource(getattr(fn, "fn", fn))
    except (OSError, TypeError):
        return False
    body = src.split(":", 1)[1] if "def " in src else src
    body = "\n".join(line.split("#", 1)[0] for line in body.splitlines())
    return re.search(r"\bgru_cell\s*\(", body) is not None


def _same_up_to_rounding(out, wrong, h) -> bool:
    """``out`` equals a mistaken formula's float64 value up to the fp32 rounding of its terms (of size ~1 and |h|):
    elementwise, not relative to the result, which can cancel to near 0 (a relative test then fails on rounding)."""
    return bool(((out.double() - wrong.double()).abs() <= 1e-4 * (1 + h.double().abs())).all())


@grader("GRU cell")
def grade_gru_cell(gru_cell, cases=5):
    """``gru_cell(g, r, z, n, h) -> h'``, a ``@triton.jit`` function on fp32 blocks (flashrnn's GRU):
    r' = sigmoid(r), z' = sigmoid(z), n' = tanh(n + r' * g), h' = z' * h + (1 - z') * n'."""
    require_kernel("gru_cell", gru_cell, called_as="gru_cell(g, r, z, n, h)")
    cases = runtime.positive_int("cases", cases)
    if gru_cell is cells.gru_cell or _calls_course_cell(gru_cell):
        raise AssertionError(
            "gru_cell calls the course's gru_cell: write the math yourself (sigmoid, tanh, the blend)."
        )
    rng, _ = fresh_rng()
    for j in range(cases):
        size = rng.choice([1, 17, 64, 200, 333])
        block = rng.choice([16, 64, 128])
        scale = [1.0, 3.0, 30.0][j % 3]  # 30: exp(2x) overflows fp32, so tanh must be written stably
        g, r, z, n, h = (check.random_tensor(size, dtype=torch.float32, scale=scale) for _ in range(5))
        out = check.poisoned(size, dtype=torch.float32)
        with warnings.catch_warnings():  # the interpreter's numpy exp overflows to inf in sigmoid: correct, but loud
            warnings.simplefilter("ignore", RuntimeWarning)
            _apply_cell_kernel[(triton.cdiv(size, block),)](g, r, z, n, h, out, size, CELL=gru_cell, BLOCK=block)
        where = f"{size} elements, pre-activations ~{scale:g}"
        ref = gru_reference(g, r, z, n, h)
        try:
            # h' = z h + (1 - z) n' can cancel to near 0 from terms of size ~1: allow their fp32 rounding absolutely
            check.assert_close(out, ref, dtype=torch.float32, name="h'", context=where, atol=1e-6)
        except AssertionError as exc:
            hint = ""
            if torch.isnan(out).any() and scale > 10:
                hint = (
                    " NaN at large inputs: tanh(x) as (exp(2x) - 1) / (exp(2x) + 1) is inf / inf once exp "
                    "overflows; write tanh(x) = 2 * sigmoid(2x) - 1 (tl.sigmoid is stable)."
                )
            for variant, text in _GRU_HINTS.items():
                if _same_up_to_rounding(out, gru_reference(g, r, z, n, h, variant), h):
                    hint = " It matches a common mistake: " + text
                    break
            raise AssertionError(f"{exc}{hint}") from None
    return f"{cases} random blocks (up to 333 elements, pre-activations up to ~30) against float64"


def launch_lstm_kernel(kernel, Wx, R, b, states):
    """Run the exercise's ``kernel[(NH,)](wx, r, b, s0, out, last, B, T, NH, DH=, BLOCK_B=16)`` (fp32, B <= 16)
    on poisoned outputs; returns ``(out [2, B, T, NH, DH], last [2, B, 1, NH, DH])``."""
    require_kernel("kernel", kernel)
    runtime.require_tensor("Wx", Wx, dtype=torch.float32, shape=(None, None, 4, None, None))
    B, T, _, NH, DH = Wx.shape
    if B > 16:
        raise ValueError(f"Wx has batch B={B}; the exercise's kernel holds one block of BLOCK_B=16 rows, use B <= 16.")
    runtime.require_tensor("R", R, dtype=torch.float32, shape=(4, NH, DH, DH))
    runtime.require_tensor("b", b, dtype=torch.float32, shape=(4, NH, DH))
    runtime.require_tensor("states", states, dtype=torch.float32, shape=(2, B, 1, NH, DH))
    out = check.poisoned(2, B, T, NH, DH, dtype=torch.float32)
    last = check.poisoned(2, B, 1, NH, DH, dtype=torch.float32)
    kernel[(NH,)](Wx, R, b, states, out, last, B, T, NH, DH=DH, BLOCK_B=16)
    return out, last


def _lstm_inputs(B, T, NH, DH):
    Wx = check.random_tensor(B, T, 4, NH, DH)
    R = check.random_tensor(4, NH, DH, DH, scale=0.5 / DH**0.5)
    b = check.random_tensor(4, NH, DH, scale=0.5)
    s0 = check.random_tensor(2, B, 1, NH, DH, scale=0.5)
    return Wx, R, b, s0


def _reference(Wx, R, b, s0):
    with torch.no_grad():
        return flashrnn(*(t.double() for t in (Wx, R, b, s0)), function="lstm", backend="vanilla")


def _loop_hint(out, ref, Wx, R, b, s0) -> str:
    """What the most likely mistake is, from which steps are wrong and which variant of the inputs matches."""
    B, T, _, NH, DH = Wx.shape
    unwritten = [t for t in range(T) if torch.isnan(out[:, :, t]).any()]
    if unwritten:
        return (
            f" Steps {unwritten} of the outputs were never written: at each step store h at out_rows + t * HD and "
            "c at out_rows + state_stride + t * HD (masked with mask)."
        )
    bad = [t for t in range(T) if check.relative_error(out[:, :, t], ref[:, :, t]) > 1e-4]
    if bad and bad[0] > 0:
        return (
            f" Step 0 is right but step {bad[0]} is not: h and c must carry over, so assign the cell's results to "
            "the same h and c that the next step reads (h, c = lstm_cell(...)), and use this step's Wx_t "
            "(wx_rows + t * 4 * HD)."
        )
    no_bias = "no bias: add b_i, b_f, b_z, b_o to the gate pre-activations"
    r_not_t = "R not transposed: the prologue's rt_g already holds R^T, so Ry_g = tl.dot(h, rt_g)"
    for what, alt in ((no_bias, (Wx, R, torch.zeros_like(b), s0)), (r_not_t, (Wx, R.transpose(2, 3), b, s0))):
        if check.relative_error(out, _reference(*alt)[0]) < 1e-4:
            return " It matches a common mistake: " + what + "."
    if check.relative_error(out[0], ref[1]) < 1e-4 or check.relative_error(out[1], ref[0]) < 1e-4:
        return " h and c are swapped: h goes to out_rows + t * HD, c to out_rows + state_stride + t * HD."
    return (
        " Per step: i, f, z, o = Wx_t (gate g at + g * HD) + tl.dot(h, rt_g) + b_g, "
        "then h, c = lstm_cell(i, f, z, o, c)."
    )


@grader("fused LSTM forward time loop")
def grade_lstm_loop(kernel, cases=5):
    """``kernel[(NH,)](wx, r, b, s0, out, last, B, T, NH, DH=DH, BLOCK_B=16)`` on flashrnn layouts (fp32): one
    program per head runs all T steps and writes every state (out) and the last states (last)."""
    require_kernel("kernel", kernel)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    shapes = [(1, 1, 1, 16)] + [(rng.randint(1, 3), rng.randint(2, 5), rng.randint(1, 3), 16) for _ in range(cases - 1)]
    for B, T, NH, DH in shapes:
        Wx, R, b, s0 = _lstm_inputs(B, T, NH, DH)
        out, last = launch_lstm_kernel(kernel, Wx, R, b, s0)
        ref, ref_last = _reference(Wx, R, b, s0)
        where = f"B={B}, T={T}, NH={NH}, DH={DH}"
        try:
            check.assert_close(out, ref, dtype=torch.float32, name="all states [2, B, T, NH, DH]", context=where)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{_loop_hint(out, ref, Wx, R, b, s0)}") from None
        try:
            check.assert_close(last, ref_last, dtype=torch.float32, name="last states", context=where)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc} The epilogue stores h and c after the loop: keep the loop's states in the variables h and c."
            ) from None
    speed.grade_speed("fused LSTM forward time loop", kernel)
    return f"{len(shapes)} random shapes (B 1-3, T 1-5, NH 1-3, DH 16) against float64, all states and the last"


def _lstm_step_reference(pre, c_prev, h_prev, R, dh, dc):
    """float64 autograd of one LSTM step: pre [B, 4, H] the gate pre-activations without h_prev's part; the gates
    take ``pre[:, g] + h_prev @ R[g]^T``. Returns (activations i, f, z, o, dG [B, 4, H], dh_prev, dc_prev)."""
    pre, c_prev, h_prev = (t.detach().double().requires_grad_() for t in (pre, c_prev, h_prev))
    gates = pre + torch.einsum("bk,gjk->bgj", h_prev, R.double())
    gates.retain_grad()
    i, f, o = (torch.sigmoid(gates[:, g]) for g in (0, 1, 3))
    z = torch.tanh(gates[:, 2])
    c = f * c_prev + i * z
    h = o * torch.tanh(c)
    ((h * dh.double()).sum() + (c * dc.double()).sum()).backward()
    return (i, f, z, o), gates.grad, h_prev.grad, c_prev.grad


def _step_mistakes(i, f, z, o, c_prev, dh, dc, R):
    """Likely wrong answers: [((dG, dh_prev, dc_prev) with None where not affected, message)]."""
    c = f * c_prev + i * z
    t = torch.tanh(c)

    def grads(dc_total, sig=lambda a: a * (1 - a)):
        dg = torch.stack([dc_total * z * sig(i), dc_total * c_prev * sig(f), dc_total * i * (1 - z * z),
                          dh * t * sig(o)], 1)  # fmt: skip
        return dg, torch.einsum("bgj,gjk->bk", dg, R), dc_total * f

    right = dc + dh * o * (1 - t * t)
    return [
        (
            grads(dc + dh * o),
            "dL/dc_t = dc (from step t+1) + dh o (1 - tanh(c_t)^2): the tanh between c and h has a derivative too.",
        ),  # fmt: skip
        (grads(dh * o * (1 - t * t)), "dL/dc_t also flows in from step t+1: add the carried dc to dh o tanh'(c_t)."),
        (grads(right, sig=lambda a: a), "sigmoid'(a) = s (1 - s) with s the activation: the gates arrive activated."),
        (
            (None, torch.einsum("bgj,gkj->bk", grads(right)[0], R), None),
            "dh_{t-1} = sum_g dG_g R[g]: R[g] maps h_{t-1} to gate g (gate = h R[g]^T), so the gradient goes back "
            "through R[g] untransposed.",
        ),
    ]


@grader("LSTM backward step")
def grade_lstm_backward_step(step, cases=5):
    """``step(i, f, z, o, c_prev, dh, dc, R) -> (dG, dh_prev, dc_prev)``: one reverse-time step of the LSTM. i, f, z,
    o [B, H] are the forward's activations (after sigmoid/tanh), c_prev [B, H] the previous cell state, dh and dc
    [B, H] dL/dh_t and the dL/dc_t carried from step t+1, R [4, H, H] the recurrent weights (gate g gets
    ``h_{t-1} @ R[g]^T``). Returns dG [B, 4, H] (the gradients of the four pre-activations, order i, f, z, o),
    dh_prev = dL/dh_{t-1} through R, dc_prev = dL/dc_{t-1}; checked against autograd in float64. Autograd itself is
    refused, from the aten ops the call runs (:func:`gpulab.course.method.refuse_autograd`)."""
    require_callable("step", step)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    shapes = [(1, 1)] + [(rng.choice([1, 3, 5]), rng.choice([4, 7, 16])) for _ in range(max(cases, 1) - 1)]
    for B, H in shapes:
        pre = check.random_tensor(B, 4, H, dtype=torch.float64, device="cpu", scale=1.5)
        c_prev, h_prev, dh, dc = (check.random_tensor(B, H, dtype=torch.float64, device="cpu") for _ in range(4))
        R = check.random_tensor(4, H, H, dtype=torch.float64, device="cpu", scale=0.5 / H**0.5)
        (i, f, z, o), dG, dh_prev, dc_prev = _lstm_step_reference(pre, c_prev, h_prev, R, dh, dc)
        i, f, z, o = (t.detach() for t in (i, f, z, o))
        where = f"B={B}, H={H}"
        with method.OpTrace() as trace:
            out = step(i.clone(), f.clone(), z.clone(), o.clone(), c_prev.clone(), dh.clone(), dc.clone(), R.clone())
        method.refuse_autograd(where, trace)
        cell = [op for op in trace.ops if "lstm" in op or "_backward" in op]
        if cell:
            raise AssertionError(f"{where}: your function ran {cell[0]}: write the step's chain rule yourself.")
        check_gradients(
            where, ("dG", "dh_prev", "dc_prev"), out, (dG, dh_prev, dc_prev),
            functools.partial(_step_mistakes, i, f, z, o, c_prev, dh, dc, R),
        )  # fmt: skip
    return f"{len(shapes)} random steps against autograd in float64"


@triton.jit
def _all_gates_kernel(h_ptr, r_ptr, out_ptr, B, NH, GATES: tl.constexpr, BLOCK_B: tl.constexpr, DH: tl.constexpr):
    """Program n: h of head n [B, DH] (rows past B zero) -> GATES(h, r_ptr, n, NH, BLOCK_B, DH) = four [BLOCK_B, DH]
    products, stored as out [4, NH, B, DH]; GATES is the learner's ``@triton.jit`` function."""
    n = tl.program_id(0)
    rows = tl.arange(0, BLOCK_B)
    cols = tl.arange(0, DH)
    mask = (rows < B)[:, None] & (cols < DH)[None, :]
    tile = rows[:, None] * DH + cols[None, :]
    h = tl.load(h_ptr + n * B * DH + tile, mask=mask, other=0.0)
    i, f, z, o = GATES(h, r_ptr, n, NH, BLOCK_B, DH)
    gate = NH * B * DH
    tl.store(out_ptr + n * B * DH + tile, i, mask=mask)
    tl.store(out_ptr + gate + n * B * DH + tile, f, mask=mask)
    tl.store(out_ptr + 2 * gate + n * B * DH + tile, z, mask=mask)
    tl.store(out_ptr + 3 * gate + n * B * DH + tile, o, mask=mask)


_ALL_GATES_SIGNATURE = {"h_ptr": "*fp32", "r_ptr": "*fp32", "out_ptr": "*fp32", "B": "i32", "NH": "i32"}


def check_all_gates_method(all_gates, block_b: int = 16, dh: int = 16) -> None:
    """AssertionError naming the mistake unless ``all_gates``, compiled (sm_90 TTIR) inside the grader's kernel,
    makes exactly one ``tt.dot`` of shape [BLOCK_B, 4 * DH]."""
    ir = method.ttir(_all_gates_kernel, _ALL_GATES_SIGNATURE, {"GATES": all_gates, "BLOCK_B": block_b, "DH": dh})
    found = method.dots(ir)
    want = (block_b, 4 * dh)
    shapes = ", ".join("x".join(map(str, d.out)) for d in found)
    if not found:
        raise AssertionError(
            "all_gates compiles to no tt.dot: products written as tl.sum(h[:, :, None] * r[None], 1) run on the CUDA "
            "cores, element by element, not on the tensor cores. Make ONE tl.dot of h [BLOCK_B, DH] with the "
            "[DH, 4 * DH] tile R_all^T."
        )
    if len(found) > 1:
        raise AssertionError(
            f"all_gates compiles to {len(found)} tt.dot ops ({shapes}): that is lesson 6's v1 (one product per gate). "
            "Load R^T of all four gates as ONE [DH, 4 * DH] tile and make one product [BLOCK_B, 4 * DH]; then take "
            "the gates apart."
        )
    if found[0].out != want or found[0].in_loop:
        loop = " inside a loop (one gate per iteration is four products)" if found[0].in_loop else ""
        raise AssertionError(
            f"all_gates makes one tt.dot of shape {shapes}{loop}, not [BLOCK_B, 4 * DH] = {list(want)}: the one "
            "product must cover all four gates, h [BLOCK_B, DH] times R_all^T [DH, 4 * DH]."
        )


def _gate_order_hint(out, want) -> str:
    """If ``out`` [4, ...] is ``want`` with its gates permuted, a hint naming which slot got which gate."""
    tol = check.tolerance(torch.float32)
    for perm in itertools.permutations(range(4)):
        if perm != (0, 1, 2, 3) and check.relative_error(out, want[list(perm)]) <= tol:
            order = ", ".join(f"your {'ifzo'[a]} is gate {'ifzo'[b]}" for a, b in enumerate(perm) if a != b)
            return (
                f" The products are right but in the wrong order ({order}). tl.split halves the LAST dimension: "
                "reshaped to [BLOCK_B, 2, 2, DH], gate g = 2a + c sits at [b, a, c, j]; permute to [b, j, a, c], "
                "split over c (gates 0, 2 | 1, 3), then split each half over a."
            )
    return ""


@grader("all gates in one product")
def grade_all_gates(all_gates, cases=4):
    """``all_gates(h, r_ptr, n, NH, BLOCK_B, DH)``, a ``@triton.jit`` function: from h [BLOCK_B, DH] (fp32) and R
    [4, NH, DH, DH] (``r_ptr``; gate g of head n gets ``h @ R[g, n]^T``), the four gates' products, each [BLOCK_B,
    DH], in the order i, f, z, o, from ONE ``tl.dot`` of h with the [DH, 4 * DH] tile R_all^T. The method is read from
    the compiled TTIR (sm_90, no GPU needed): exactly one ``tt.dot``, of shape [BLOCK_B, 4 * DH]. Then checked on
    random heads and batches against float64."""
    require_kernel("all_gates", all_gates, called_as="all_gates(h, r_ptr, n, NH, BLOCK_B, DH)")
    cases = runtime.positive_int("cases", cases)
    check_all_gates_method(all_gates)
    rng, _ = fresh_rng()
    shapes = [(1, 1, 16)] + [(rng.choice([2, 7, 16]), rng.choice([1, 2, 3]), 16) for _ in range(max(cases, 2) - 2)]
    shapes.append((rng.choice([3, 16]), 2, 32))
    for B, NH, DH in shapes:
        h = check.random_tensor(NH, B, DH, dtype=torch.float32, device=runtime.device)
        R = check.random_tensor(4, NH, DH, DH, dtype=torch.float32, device=runtime.device, scale=DH**-0.5)
        out = check.poisoned(4, NH, B, DH, dtype=torch.float32, device=runtime.device)
        _all_gates_kernel[(NH,)](h, R, out, B, NH, GATES=all_gates, BLOCK_B=16, DH=DH)
        want = torch.einsum("nbk,gnjk->gnbj", h.double(), R.double())
        where = f"B={B}, NH={NH}, DH={DH}"
        if check.relative_error(out, want) <= check.tolerance(torch.float32):
            continue
        hint = ""
        transposed = torch.einsum("nbk,gnkj->gnbj", h.double(), R.double())
        if check.relative_error(out, transposed) <= check.tolerance(torch.float32):
            hint = (
                " It equals h @ R[g, n] without the transpose: element [k, c] of the tile is R[g, n, j, k] (input "
                "unit k is the row, gate g = c // DH and unit j = c % DH the column), offset g*NH*DH*DH + n*DH*DH + "
                "j*DH + k."
            )
        else:
            hint = _gate_order_hint(out, want)
        try:
            check.assert_close(out, want, dtype=torch.float32, name="gates", context=where)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{hint}") from None
        raise AssertionError(f"{where}: the gates differ from float64 h @ R[g, n]^T.{hint}")
    return f"{len(shapes)} random heads and batches (head dims 16 and 32) against float64"


@grader("does a head fit on chip")
def grade_shared_bytes(shared_bytes, cases=8):
    """``shared_bytes(head_dim, function, dtype_bytes, block_b) -> int``: the shared memory the fused kernel needs per
    program, as :func:`gpulab.rnn.fused.tiling.candidates` counts it: ``R_all`` (gate slots x D x D elements, D the
    head dim padded to the tensor cores' block) plus one [block_b, slots x D] layout-conversion buffer."""
    require_callable("shared_bytes", shared_bytes)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    functions = ("lstm", "gru", "elman")
    cases_ = [(64, "lstm", 2, 16), (17, "gru", 4, 16)] + [
        (rng.choice([1, 16, 20, 33, 64, 100, 128, 200]), rng.choice(functions), rng.choice([2, 4]), bb)
        for bb in (rng.choice([16, 32, 64]) for _ in range(max(cases, 2) - 2))
    ]  # fmt: skip
    for dh, function, e, bb in cases_:
        g, d = tiling.slots(function), runtime.dot_block(dh)
        want = g * d * d * e + g * bb * d * e
        got = shared_bytes(dh, function, e, bb)
        where = f"head_dim={dh}, {function}, {e}-byte elements, block_b={bb}"
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise AssertionError(f"{where}: shared_bytes returned {got!r}; return a whole number of bytes (an int).")
        gates = get_function(function).gates_r
        check_number(where, got, want, [
            (g * dh * dh * e + g * bb * dh * e, "pad the head dim to the tensor cores' block first: "
             "D = gpulab.runtime.dot_block(head_dim) (a power of two, at least 16), for R and the buffer alike."),
            (g * d * d * e, "add the layout-conversion buffer: one [block_b, slots x D] tile beside R_all."),
            (gates * d * d * e + gates * bb * d * e, "the tiles have gpulab.rnn.fused.tiling.slots(function) gate "
             "slots (the GRU's three recurrent gates are padded to four), not the function's gate count."),
        ], " bytes")  # fmt: skip
    return f"{len(cases_)} head sizes, functions and dtypes against gpulab.rnn.fused.tiling's count"


@grader("bytes of R per forward")
def grade_r_bytes(r_bytes, cases=6):
    """``r_bytes(T, NH, DH, itemsize, fused) -> int``: the bytes of the LSTM's recurrent weights R [4, NH, DH, DH] one
    forward pass over T steps reads: once (``fused``, R stays on chip) or at every step (``alternating``)."""
    require_callable("r_bytes", r_bytes)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    cases_ = [(1024, 12, 64, 2, True), (1024, 12, 64, 2, False)] + [
        (rng.choice([1, 7, 100]), rng.choice([1, 3]), rng.choice([16, 48, 100]), rng.choice([2, 4]), rng.random() < 0.5)
        for _ in range(max(cases, 2) - 2)
    ]  # fmt: skip
    for T, NH, DH, e, fused in cases_:
        once = 4 * NH * DH * DH * e
        want = once if fused else T * once
        where = f"T={T}, NH={NH}, DH={DH}, {e}-byte elements, {'fused' if fused else 'alternating'}"
        got = r_bytes(T, NH, DH, e, fused)
        if not isinstance(got, numbers.Integral) or isinstance(got, bool):
            raise AssertionError(f"{where}: r_bytes returned {got!r}; return a whole number of bytes (an int).")
        check_number(where, got, want, [
            (want // 4, "R has four gates (i, f, z, o), each an [NH, DH, DH] block: count all four."),
            (want // e, "that is elements; multiply by the bytes per element (itemsize)."),
            (T * once if fused else once, "the fused kernel reads R once for the whole sequence; alternating reads "
             "it at every one of the T steps." if fused else "alternating has no R on chip: it reads R at every one "
             "of the T steps."),
            (want // NH, "every head has its own R: count all NH heads."),
        ], " bytes")  # fmt: skip
    return f"{len(cases_)} problem sizes, fused and alternating"


def phase_driver(program, R, h0, T, P, seed=0):
    """Run ``program(p, P, T, R_p, ex)`` (a generator: one ``yield`` = arriving at the grid barrier) for programs
    p = 0..P-1 the way the interpreter runs a grid, one program after another, and the way a barrier orders them:
    phase by phase, every program advanced to its next ``yield`` before any goes past it, in a random order per phase
    (``seed``). ``ex`` [T + 1, DH] is the exchange buffer: ``ex[0] = h0``, the rest NaN until written. Returns
    ``(ex, barriers)``: the buffer after the run and the barriers each program reached."""
    dh = h0.shape[-1]
    units = dh // P
    ex = torch.full((T + 1, dh), float("nan"), dtype=h0.dtype)
    ex[0] = h0
    gens = [program(p, P, T, R[p * units : (p + 1) * units].clone(), ex) for p in range(P)]
    if not all(inspect.isgenerator(g) for g in gens):
        raise AssertionError(
            "program must be a generator: write `yield` where the program arrives at the grid barrier (a function "
            "without yield runs all its steps at once, with nobody to wait for)."
        )
    order = random.Random(seed)
    barriers, live = [0] * P, list(range(P))
    while live:
        order.shuffle(live)
        for p in list(live):
            try:
                next(gens[p])
                barriers[p] += 1
            except StopIteration:
                live.remove(p)
    return ex, barriers


def _split_reference(R, h0, T):
    h, out = h0.double(), []
    for _ in range(T):
        h = torch.tanh(h @ R.double().T)
        out.append(h)
    return torch.stack(out)


@grader("split kernel: exchange and barrier")
def grade_split_exchange(program, cases=5):
    """``program(p, P, T, R_p, ex)``, a Python generator: program p of P owns units ``p*U .. (p+1)*U - 1`` of a head
    of DH = P*U (``R_p`` = the rows of R [DH, DH] of its units) and runs T steps of h_t = tanh(h_{t-1} R^T), reading
    the whole h_{t-1} from the exchange buffer ``ex`` [T + 1, DH] (``ex[0]`` = h0) and writing its units of h_t to
    ``ex[t]``; each ``yield`` is its arrival at the grid barrier. Run by :func:`phase_driver` in random program
    orders: the values against float64, and the method: one barrier per step, after the store, before the next read.
    """
    require_callable("program", program)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    sizes = [(1, 1, 1), (3, 2, 4)][:cases] + [
        (rng.randint(2, 4), rng.randint(1, 4), rng.randint(1, 5)) for _ in range(max(cases - 2, 0))
    ]  # (P, U, T)
    for P, U, T in sizes:
        dh = P * U
        R = check.random_tensor(dh, dh, dtype=torch.float64, device="cpu", scale=1.0 / dh**0.5)
        h0 = check.random_tensor(dh, dtype=torch.float64, device="cpu")
        want = _split_reference(R, h0, T)
        for order in range(3):
            where = f"P={P} programs of {U} units, T={T}, program order {order}"
            ex, barriers = phase_driver(program, R, h0, T, P, seed=rng.randrange(1 << 30))
            if any(b != barriers[0] for b in barriers):
                raise AssertionError(f"{where}: the programs reached {barriers} barriers; all must reach the same.")
            if barriers[0] != T:
                extra = (
                    " one per step is enough: slot ex[t] is written once and never overwritten"
                    if barriers[0] > T
                    else ""
                )
                raise AssertionError(f"{where}: {barriers[0]} barriers for {T} steps (yield once per step);{extra}.")
            if torch.isnan(ex[1:]).any():
                t = int(torch.isnan(ex[1:]).any(1).nonzero()[0]) + 1
                raise AssertionError(
                    f"{where}: h_{t} has units nobody wrote, or computed from a h_{t - 1} read before every program "
                    f"had written it (NaN here): store your units of h_t into ex[t], THEN yield (the barrier), and "
                    "read ex[t - 1] only after the barrier of step t - 1."
                )
            if check.relative_error(ex[1:], want) > 1e-12:
                own = torch.zeros_like(want)
                h = h0.clone()
                for t in range(T):  # a program that reads only its own units of h_{t-1}
                    for p in range(P):
                        m = torch.zeros(dh, dtype=torch.float64)
                        m[p * U : (p + 1) * U] = 1
                        own[t, p * U : (p + 1) * U] = torch.tanh((h * m) @ R[p * U : (p + 1) * U].T)
                    h = own[t]
                hint = ""
                if check.relative_error(ex[1:], own) <= 1e-12:
                    hint = (
                        " It is what a program computes from its OWN units of h_{t-1} only: every unit of h_t needs "
                        "all of h_{t-1}, read it whole from ex[t - 1] (written by all programs)."
                    )
                try:
                    check.assert_close(ex[1:], want, dtype=torch.float64, rtol=1e-12, name="h_1..h_T", context=where)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}{hint}") from None
    return f"{len(sizes)} splits x 3 program orders: one barrier per step, after the store, values against float64"
