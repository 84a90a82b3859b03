"""Graders for exercise 4 (attention): the online-softmax update, the inner loop of the forward kernel, the backward
for one block, the K/V bytes and the causal forward. Triton answers are also read as compiled TTIR, PyTorch answers
as the aten ops they run (:mod:`gpulab.course.method`).

Each runs the learner's code on fresh random sizes against float64 references and raises AssertionError with a
message that says what to fix. On success it prints one deterministic line (nbval compares it)."""

from __future__ import annotations

import functools
import math

import torch
import triton

from gpulab import check, runtime
from gpulab.attention import attention_reference
from gpulab.course import method, speed
from gpulab.course.grading import check_gradients, check_number, fresh_rng, grader, require_callable, require_kernel
from gpulab.triton_ops import LOG2E_F


@grader("online softmax update")
def grade_online_update(update, cases=6):
    """``update(m, l, x) -> (m_new, l_new)``: fold a block ``x`` [R, C] into each row's running max ``m`` [R] and
    running sum ``l`` [R] (of ``exp(value - m)``). Folding every block of a row must give ``m = max`` and
    ``m + log(l) = logsumexp`` of the row, for any split into blocks, huge values, and rows that are ``-inf`` so far.
    """
    require_callable("update", update)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    for j in range(cases):
        # case 1 always has a row that starts masked (-inf), so the NaN guard is always tried
        rows, cols = rng.randint(1, 5), rng.choice([7, 33, 100] if j == 1 else [1, 7, 33, 100])
        scale = [1.0, 30.0, 1000.0][j % 3]  # 1000: exp of the raw values overflows even float64
        x = check.random_tensor(rows, cols, dtype=torch.float32, device="cpu", scale=scale)
        if j % 2 == 1 and cols > 2:  # a masked row start: the first values of row 0 are -inf
            x[0, : cols // 2] = float("-inf")
        block = rng.randint(1, cols // 2 if j == 1 else cols)  # case 1: a first block of only -inf
        where = f"rows={rows}, cols={cols}, blocks of {block}, values ~{scale:g}"
        m = torch.full((rows,), float("-inf"))
        l = torch.zeros(rows)  # noqa: E741 - the paper's name
        for start in range(0, cols, block):
            out = update(m, l, x[:, start : start + block])
            if not isinstance(out, tuple) or len(out) != 2:
                raise AssertionError(f"update returned {type(out).__name__}; return the pair (m_new, l_new).")
            m, l = out  # noqa: E741
            if torch.isnan(m).any() or torch.isnan(l).any():
                raise AssertionError(
                    f"{where}: NaN after the block at column {start}. A row that has seen only -inf has m = -inf, "
                    "and exp(m - m_new) is exp(-inf - (-inf)) = NaN: use 0 as the reference point while m_new is "
                    "-inf (l stays 0)."
                )
        x64 = x.double()
        check.assert_close(m, x64.max(1).values, name="m (running max)", context=where)
        lse = m.double() + torch.log(l.double())
        ref = torch.logsumexp(x64, 1)
        if not torch.isfinite(lse).all():
            raise AssertionError(
                f"{where}: m + log(l) is not finite; rescale l by exp(m_old - m_new) before adding this block's "
                "sum of exp(x - m_new), so that no exp ever sees a large positive argument."
            )
        # fp32 rounding of m and log(l) is absolute: a log-sum-exp near 0 has no relative precision to spare
        check.assert_close(lse, ref, rtol=1e-5, atol=1e-6, name="m + log(l) (the log-sum-exp)", context=where)
    return f"{cases} random row sets, any block split, values up to 1e3 and -inf"


_FORWARD_SIGNATURE = {"q_ptr": "*fp32", "k_ptr": "*fp32", "v_ptr": "*fp32", "o_ptr": "*fp32", "n_q": "i32",
                      "n_k": "i32", "qk_scale": "fp32"}  # fmt: skip


def check_forward_method(kernel, head_dim: int = 16, block_m: int = 16, block_n: int = 16, what: str = "kernel"):
    """AssertionError naming the mistake unless the forward ``kernel``, compiled (sm_90 TTIR), loops over key blocks
    with two ``tt.dot`` in the loop (S = Q K^T [BLOCK_M, BLOCK_N], then P V [BLOCK_M, HEAD_DIM]) and masks every
    load and store of a tile (a ragged last block would read or write past the end)."""
    consts = {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n}
    ir = method.ttir(kernel, _FORWARD_SIGNATURE, consts)
    found = method.dots(ir)
    looped = [d.out for d in found if d.in_loop]
    if not found:
        raise AssertionError(
            f"the {what} compiles to no tt.dot: scores written as tl.sum(q[:, None, :] * k[None], 2) run on the CUDA "
            "cores element by element; make S = tl.dot(q, tl.trans(k)) and the output tl.dot(p, v), on the tensor "
            "cores."
        )
    if sorted(looped) != sorted([(block_m, block_n), (block_m, head_dim)]):
        shapes = ", ".join("x".join(map(str, d.out)) + (" (in the loop)" if d.in_loop else "") for d in found)
        raise AssertionError(
            f"the {what}'s tt.dot ops are {shapes}; the loop over key blocks makes two per block: S = Q K^T of shape "
            f"[BLOCK_M, BLOCK_N] = [{block_m}, {block_n}] and P V of shape [BLOCK_M, HEAD_DIM] = [{block_m}, "
            f"{head_dim}], both inside `for start_n in range(...)`."
        )
    for op in method.loads_and_stores(ir):
        if not op.masked:
            raise AssertionError(
                f"the {what} has a tl.{op.kind} of a {list(op.shape)} tile without a mask: the last block of rows or "
                f"keys is ragged, and an unmasked {op.kind} {'reads' if op.kind == 'load' else 'writes'} past the end "
                "of the tensor. Mask it with the block's indices (offs_m < n_q for Q and O, cols < n_k for K and V)."
            )


@grader("FlashAttention forward inner loop")
def grade_forward_kernel(kernel, cases=4):
    """``kernel[(cdiv(n_q, BLOCK_M), B*H)](q, k, v, o, n_q, n_k, qk_scale, HEAD_DIM=, BLOCK_M=, BLOCK_N=)`` on
    contiguous [B*H, N, HEAD_DIM] tensors must write O = softmax(scale Q K^T) V (non-causal) for every row. The method
    is read from the compiled TTIR first (:func:`check_forward_method`); Q, K and V sit in buffers poisoned with NaN
    past their end, so a read past the end shows in O."""
    require_kernel("kernel", kernel)
    cases = runtime.positive_int("cases", cases)
    check_forward_method(kernel)
    rng, _ = fresh_rng()
    # a single key, then several ragged key blocks (where the rescaling shows), then random shapes
    shapes = [(1, 1, 1, 16), (2, 17, 50, 16)][:cases] + [
        (rng.randint(1, 3), rng.choice([1, 17, 33, 40]), rng.choice([1, 16, 17, 50]), rng.choice([16, 32]))
        for _ in range(cases - 2)
    ]
    for bh, n_q, n_k, d in shapes:
        q, k, v = (_fenced(check.random_tensor(1, bh, n, d, scale=s)) for n, s in ((n_q, 2.0), (n_k, 2.0), (n_k, 1.0)))
        o = check.poisoned(1, bh, n_q, d, dtype=torch.float32, device=runtime.device)
        scale = 1.0 / math.sqrt(d)
        where = f"B*H={bh}, n_q={n_q}, n_k={n_k}, head_dim={d}, 16 x 16 tiles"
        kernel[(triton.cdiv(n_q, 16), bh)](q, k, v, o, n_q, n_k, scale * LOG2E_F, HEAD_DIM=d, BLOCK_M=16, BLOCK_N=16)
        if torch.isnan(o).any():
            raise AssertionError(
                f"{where}: some outputs are NaN: either never written (store every row of the block, masked with "
                "offs_m < n_q) or computed from masked keys (set scores of keys >= n_k to -inf before the max)."
            )
        ref = attention_reference(q, k, v)
        try:
            check.assert_close(o, ref, dtype=torch.float32, name="O", context=where)
        except AssertionError as exc:
            hint = ""
            if n_k % 16:
                hint = " The last K block is ragged: load it with mask cols < n_k and give those scores -inf."
            raise AssertionError(
                f"{exc}{hint} Check the rescaling: alpha = exp2(m_old - m_new) multiplies both l and acc."
            ) from None
    speed.grade_speed("FlashAttention forward inner loop", kernel)
    return f"{len(shapes)} random shapes (ragged, single row, single key) against float64"


@grader("causal FlashAttention forward")
def grade_causal_forward(kernel, cases=4):
    """``kernel[(cdiv(n, BLOCK_M), B*H)](q, k, v, o, n, n, qk_scale, HEAD_DIM=, BLOCK_M=, BLOCK_N=)`` (the forward
    kernel's launch, n_q = n_k = n) must write causal attention: query i sees keys j <= i only. The method is read
    from the TTIR (as :func:`check_forward_method`) and from one Q block launched alone over K and V whose rows past
    that block's last query are NaN: a kernel that still loads the key blocks above the diagonal, instead of ending
    its loop there, reads the NaN."""
    require_kernel("kernel", kernel)
    cases = runtime.positive_int("cases", cases)
    check_forward_method(kernel, what="causal kernel")
    rng, _ = fresh_rng()
    shapes = [(1, 17, 16, 16, 16), (2, 45, 16, 32, 16)][:cases] + [
        (rng.randint(1, 3), rng.choice([1, 17, 33, 50]), rng.choice([16, 32]), bm, 16)
        for bm in (rng.choice([16, 32]) for _ in range(cases - 2))
    ]  # (B*H, n, head dim, BLOCK_M, BLOCK_N)
    for bh, n, d, bm, bn in shapes:
        q, k, v = (_fenced(check.random_tensor(1, bh, n, d, scale=s)) for s in (2.0, 2.0, 1.0))
        o = check.poisoned(1, bh, n, d, dtype=torch.float32, device=runtime.device)
        scale = 1.0 / math.sqrt(d)
        where = f"B*H={bh}, n={n}, head_dim={d}, BLOCK_M={bm}, BLOCK_N={bn}"
        kernel[(triton.cdiv(n, bm), bh)](q, k, v, o, n, n, scale * LOG2E_F, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn)
        want = attention_reference(q, k, v, is_causal=True)
        if check.relative_error(o, want) <= check.tolerance(torch.float32):
            continue
        s = scale * q.double() @ k.double().transpose(-1, -2)
        strict = torch.ones(n, n, dtype=torch.bool, device=q.device).tril(-1)
        below = torch.softmax(s.masked_fill(~strict, float("-inf")), -1).nan_to_num() @ v.double()
        tol = check.tolerance(torch.float32)
        only_first = n > 1 and torch.isnan(o[..., 0, :]).all() and not torch.isnan(o[..., 1:, :]).any()
        if only_first or check.relative_error(o[..., 1:, :].nan_to_num(), below[..., 1:, :]) <= tol:
            hint = " Query i sees key i too: the mask is cols <= rows, not cols < rows (query 0 saw no key at all)."
        elif torch.isnan(o).any():
            hint = " Some outputs are NaN: store every row (masked with offs_m < n) and mask keys >= n too."
        elif check.relative_error(o, attention_reference(q, k, v)) <= tol:
            hint = " It is the non-causal output: give the scores of keys j > i (cols > rows) a score of -inf."
        else:
            hint = ""
        try:
            check.assert_close(o, want, dtype=torch.float32, name="O (causal)", context=where)
        except AssertionError as exc:
            raise AssertionError(f"{exc}{hint}") from None
    # the method: Q block 0 alone (16 queries) over n = 64 keys whose rows 16.. are NaN, BLOCK_N = 16
    n, d = 64, 16
    q, k, v = (check.random_tensor(1, 1, n, d) for _ in range(3))
    k[..., 16:, :] = float("nan")
    v[..., 16:, :] = float("nan")
    o = check.poisoned(1, 1, n, d, dtype=torch.float32, device=runtime.device)
    kernel[(1, 1)](q, k, v, o, n, n, LOG2E_F / 4, HEAD_DIM=d, BLOCK_M=16, BLOCK_N=16)
    if torch.isnan(o[..., :16, :]).any():
        raise AssertionError(
            "the first Q block (queries 0-15) read key blocks above the diagonal (keys 16-63, NaN here): masking "
            "their scores to -inf still loads them and multiplies P by their V (0 x NaN = NaN), and on a GPU costs "
            "half the work. End the loop at the block's last query: for start_n in range(0, min(n_k, (pid_m + 1) "
            "* BLOCK_M), BLOCK_N), and mask the scores only in the blocks that straddle the diagonal."
        )
    return f"{len(shapes)} random shapes (BLOCK_M 16 and 32) against float64, key blocks past the diagonal skipped"


def _fenced(t: torch.Tensor, rows: int = 64) -> torch.Tensor:
    """``t`` [1, BH, N, D] copied into the front of a buffer whose tail (``rows`` rows of D past the end) is NaN."""
    d = t.shape[-1]
    buf = check.poisoned(t.numel() + rows * d, dtype=t.dtype, device=t.device)
    view = buf[: t.numel()].view(t.shape)
    view.copy_(t)
    return view


def _backward_reference(q, k, v, do, scale):
    """float64 (dq, dk, dv) of O = softmax(scale Q K^T) V for one head, by autograd."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    o = torch.softmax(scale * q @ k.T, dim=-1) @ v
    return torch.autograd.grad(o, (q, k, v), do.double())


def _backward_mistakes(q, k, v, o, do, lse, scale):
    """The likely wrong answers, each with what to fix: [((dq, dk, dv), message)]."""
    q, k, v, o, do, lse = (t.double() for t in (q, k, v, o, do, lse))
    s = scale * q @ k.T
    p = torch.exp(s - lse[:, None])
    dp = do @ v.T
    ds = p * (dp - (do * o).sum(-1)[:, None])
    no_d = p * dp
    raw = torch.exp(s)  # P not normalized: lse left out
    raw_ds = raw * (dp - (do * o).sum(-1)[:, None])
    return [
        (
            (scale * no_d @ k, scale * no_d.T @ q, None),
            "dS = P o (dP - D): subtract D = rowsum(dO o O) from every column of dP (the softmax's Jacobian has a "
            "-p p^T part, and D is what it sums to).",
        ),
        (
            (ds @ k, ds.T @ q, None),
            "S = scale Q K^T, so dQ = scale dS K and dK = scale dS^T Q: the scale comes back through the chain rule.",
        ),
        (
            (scale * raw_ds @ k, scale * raw_ds.T @ q, raw.T @ do),
            "P = exp(scale Q K^T - lse): subtract each row's log-sum-exp, or P is not the softmax the forward used.",
        ),
    ]


_PRODUCTS = ("mm", "bmm", "addmm", "baddbmm", "matmul", "mv", "dot")


def _check_backward_method(where: str, trace: method.OpTrace) -> None:
    """The method of the backward block, from the ops its call ran: no autograd, no softmax, matrix products."""
    method.refuse_autograd(where, trace)
    softmax = [op for op in trace.ops if "softmax" in op]
    if softmax:
        raise AssertionError(
            f"{where}: your function called {softmax[0]}: recompute P from the forward's log-sum-exp, "
            "P = exp(scale Q K^T - lse), as the kernel does (it has no row of scores to normalize)."
        )
    products = trace.count(*_PRODUCTS)
    if products < 4:
        raise AssertionError(
            f"{where}: your function ran {products} matrix products; the block's backward is made of them (dV from P "
            "and dO, dP from dO and V, dQ and dK from dS): write them yourself with @, not through a library's "
            "backward."
        )


@grader("attention backward for one block")
def grade_attention_backward(backward_block, cases=5):
    """``backward_block(q, k, v, o, do, lse, scale) -> (dq, dk, dv)`` for one head: q, o, do [n_q, d]; k, v [n_k, d];
    lse [n_q] the forward's log-sum-exp of ``scale q k^T`` per row (natural log). It must recompute P from lse
    (no softmax) and return the gradients of O = softmax(scale Q K^T) V, checked against autograd in float64. The
    method is read from the aten ops the call runs: autograd in any form (a ``*_backward`` op, tensors that require
    grad, ``torch.func``), a softmax, or fewer than four matrix products fail with the mistake named."""
    require_callable("backward_block", backward_block)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    shapes = [(1, 1, 4)] + [
        (rng.choice([1, 5, 17]), rng.choice([3, 16, 33]), rng.choice([8, 16])) for _ in range(cases - 1)
    ]
    for n_q, n_k, d in shapes:
        q, k, v, do = (check.random_tensor(n, d, dtype=torch.float64, device="cpu") for n in (n_q, n_k, n_k, n_q))
        scale = 1.0 / math.sqrt(d)
        s = scale * q @ k.T
        lse = torch.logsumexp(s, -1)
        o = torch.softmax(s, -1) @ v
        where = f"n_q={n_q}, n_k={n_k}, d={d}"
        with method.OpTrace() as trace:
            out = backward_block(q.clone(), k.clone(), v.clone(), o.clone(), do.clone(), lse.clone(), scale)
        _check_backward_method(where, trace)
        check_gradients(
            where, ("dq", "dk", "dv"), out, _backward_reference(q, k, v, do, scale),
            functools.partial(_backward_mistakes, q, k, v, o, do, lse, scale),
            "dK = scale dS^T Q and dV = P^T dO: the transposes put the key dimension first.",
        )  # fmt: skip
    return f"{len(shapes)} random blocks (one query, ragged keys) against autograd in float64"


@grader("K/V bytes read by the forward")
def grade_kv_bytes(kv_bytes, cases=8):
    """``kv_bytes(n, d, block_m, elem_bytes) -> int``: bytes of K and V one head's forward reads when each of its
    Q blocks (``block_m`` rows, the last one ragged) reads all ``n`` keys and values of head dim ``d``."""
    require_callable("kv_bytes", kv_bytes)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    shapes = [(4096, 128, 128, 2), (1000, 64, 128, 2)] + [
        (rng.choice([1, 17, 512, 1000, 4096]), rng.choice([64, 128]), rng.choice([64, 128]), rng.choice([2, 4]))
        for _ in range(max(cases, 2) - 2)
    ]
    for n, d, bm, e in shapes:
        blocks = -(-n // bm)
        want = blocks * 2 * n * d * e
        got = kv_bytes(n, d, bm, e)
        where = f"n={n}, d={d}, block_m={bm}, {e}-byte elements"
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise AssertionError(f"{where}: got {got!r}, expected {want} bytes.")
        check_number(where, got, want, [
            (blocks * n * d * e, "count both K and V: 2 N d elements per Q block."),
            (n / bm * 2 * n * d * e, "the last Q block is ragged but reads all of K and V too: ceil(n / block_m)."),
            (2 * n * d * e, "every Q block reads K and V again: multiply by the number of Q blocks."),
        ], " bytes")  # fmt: skip
    return f"{len(shapes)} sizes (ragged last Q block included)"
