"""Graders for exercise 4 (attention): the online-softmax update, the inner loop of the forward kernel, the backward
for one block, the K/V bytes, the causal forward, and the attention op assembled from the learner's forward kernel
and backward (CS336's problem). Triton answers are also read as compiled TTIR, PyTorch answers as the aten ops they
run, and the op by the kernels it launches (:mod:`gpulab.course.method`).

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


_OP_SIGNATURE = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
                 "n_q": "i32", "n_k": "i32", "qk_scale": "fp32"}  # fmt: skip
_SDPA_OPS = ("scaled_dot_product", "_flash_attention", "_efficient_attention", "_cudnn_attention")
# autograd nodes that only move or view data: any other node between the op's output and q, k, v means autograd
# differentiates the forward's arithmetic
_DATA_NODES = ("View", "UnsafeView", "Reshape", "Transpose", "Permute", "Clone", "ToCopy", "Expand", "Slice",
               "Select", "Unsqueeze", "Squeeze", "AsStrided", "Alias", "Contiguous", "AccumulateGrad")  # fmt: skip


def _autograd_nodes(out: torch.Tensor) -> tuple[bool, list[str]]:
    """(whether a custom ``autograd.Function`` is between ``out`` and the leaves, the names of the other nodes that
    do arithmetic)."""
    seen, stack, custom, arithmetic = set(), [out.grad_fn], False, []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            custom = True
            continue  # below a custom Function its own forward's graph was never recorded
        name = type(node).__name__
        if not name.startswith(_DATA_NODES):
            arithmetic.append(name)
        stack.extend(n for n, _ in node.next_functions)
    return custom, arithmetic


def _check_op_forward(where: str, kernel, out, trace: method.OpTrace, launched: list) -> None:
    """The attention op's forward, from what it ran: no SDPA or softmax, the learner's kernel launched, an output
    whose backward is the learner's (a custom ``autograd.Function``), not autograd's."""
    sdpa = [op for op in trace.ops if any(name in op for name in _SDPA_OPS)]
    if sdpa:
        raise AssertionError(
            f"{where}: the forward ran {sdpa[0]}, PyTorch's own attention (SDPA): the op's forward is your causal "
            "kernel of task 5, extended to store the log-sum-exp the backward needs."
        )
    softmax = [op for op in trace.ops if "softmax" in op]
    if softmax:
        raise AssertionError(
            f"{where}: the forward ran {softmax[0]}: the op's forward is your kernel (online softmax in tiles), "
            "not a softmax over whole rows of scores in PyTorch."
        )
    products = trace.count(*_PRODUCTS)
    if products:
        raise AssertionError(
            f"{where}: the forward ran {products} matrix products in PyTorch besides the kernel (scores of N x N "
            "for the log-sum-exp?): the kernel has each row's m and l when its loop ends; store lse from them."
        )
    if getattr(kernel, "fn", kernel) not in launched:
        ran = ", ".join(sorted({getattr(f, "__name__", repr(f)) for f in launched})) or "no Triton kernel"
        raise AssertionError(
            f"{where}: the forward launched {ran}, not the kernel you passed ({getattr(kernel, '__name__', kernel)}): "
            "launch it inside the op's forward, kernel[(cdiv(n, BLOCK_M), B * H)](q, k, v, o, lse, ...)."
        )
    if not isinstance(out, torch.Tensor):
        raise AssertionError(f"{where}: attention returned {type(out).__name__}; return O, a tensor [B, H, N, D].")
    if out.grad_fn is None:
        raise AssertionError(
            f"{where}: O has no grad_fn, so no gradient can reach q, k and v: wrap the forward and your backward in "
            "a torch.autograd.Function (forward launches the kernel and saves what the backward needs; backward "
            "returns dq, dk, dv) and return CausalAttention.apply(q, k, v)."
        )
    custom, arithmetic = _autograd_nodes(out)
    if arithmetic or not custom:
        raise AssertionError(
            f"{where}: autograd differentiates your forward ({', '.join(arithmetic[:3]) or 'no custom Function'} in "
            "its graph): the op's backward is yours, in the backward of a torch.autograd.Function, and its forward "
            "launches the kernel (autograd cannot see through a kernel anyway)."
        )


def _check_op_backward(where: str, trace: method.OpTrace) -> None:
    """The attention op's backward, from the ops it ran: no autograd inside, no softmax, matrix products."""
    if trace.backward_ops or trace.functorch or trace.recorded:
        how = trace.backward_ops[0] if trace.backward_ops else (
            "a torch.func transform" if trace.functorch else f"{trace.recorded} ops with grad mode on"
        )  # fmt: skip
        raise AssertionError(
            f"{where}: the op's backward used autograd ({how}): the backward of a reference differentiated by "
            "autograd hands you the answer; write task 3's algebra (P from the log-sum-exp, D = rowsum(dO o O)) "
            "with the causal mask, in blocks of keys."
        )
    softmax = [op for op in trace.ops if "softmax" in op]
    if softmax:
        raise AssertionError(
            f"{where}: the op's backward ran {softmax[0]}: recompute P from the saved log-sum-exp, "
            "P = exp(scale Q K^T - lse), with P = 0 above the diagonal."
        )
    products = trace.count(*_PRODUCTS)
    if products < 4:
        raise AssertionError(
            f"{where}: the op's backward ran {products} matrix products; it is made of them (dV = P^T dO, "
            "dP = dO V^T, dQ = scale dS K, dK = scale dS^T Q), written with @."
        )


def _unmasked_backward(q, k, v, o, do):
    """float64 (dq, dk, dv) of the common mistake: task 3's algebra with the causal lse but P not masked."""
    q, k, v, o, do = (t.detach().double() for t in (q, k, v, o, do))
    n, scale = q.shape[-2], 1.0 / math.sqrt(q.shape[-1])
    s = scale * q @ k.mT
    lse = torch.logsumexp(s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf), -1)
    p = torch.exp(s - lse[..., None])
    ds = p * (do @ v.mT - (do * o).sum(-1, keepdim=True))
    return scale * ds @ k, scale * ds.mT @ q, p.mT @ do


@grader("attention op: forward and backward (CS336)")
def grade_attention_op(attention, kernel=None, cases=3):
    """``attention(q, k, v) -> O``: causal attention of q, k, v [B, H, N, D] (scale 1/sqrt(D)), differentiable in all
    three, assembled from the learner's forward kernel ``kernel`` (task 5's, also storing the log-sum-exp; its
    signature ``(q, k, v, o, lse, n_q, n_k, qk_scale, HEAD_DIM=, BLOCK_M=, BLOCK_N=)``) and their backward (task 3's
    algebra, causal). Checked against float64 (O and dQ, dK, dV) on fresh sizes; the method from the kernel's TTIR
    (compiled for bf16, as :func:`check_forward_method`), the kernels the forward launches (``kernel`` among them),
    its autograd graph (a custom Function, no arithmetic recorded) and the aten ops of forward and backward (no SDPA,
    no softmax, no autograd inside the backward). On a GPU, a bf16 case too, and then the speed on CS336's problem."""
    require_callable("attention", attention)
    cases = runtime.positive_int("cases", cases)
    require_kernel("kernel", kernel)  # the op's forward kernel, which the forward must launch
    check_op_kernel_method(kernel)
    rng, _ = fresh_rng()
    shapes = [(1, 1, 1, 16), (1, 2, 33, 16)][:cases] + [
        (rng.randint(1, 2), rng.randint(1, 2), rng.choice([17, 40, 50]), rng.choice([16, 32])) for _ in range(cases - 2)
    ]  # (B, H, N, D)
    dtypes = [torch.float32] * len(shapes) + ([torch.bfloat16] if runtime.on_gpu() else [])
    if runtime.on_gpu():
        shapes.append((2, 3, 300, 64))
    for (b, h, n, d), dtype in zip(shapes, dtypes):
        where = f"B={b}, H={h}, N={n}, D={d}, {str(dtype).replace('torch.', '')}"
        q, k, v = (check.random_tensor(b, h, n, d, dtype=dtype, scale=s).requires_grad_() for s in (2.0, 2.0, 1.0))
        do = check.random_tensor(b, h, n, d, dtype=dtype)
        with method.launches() as launched, method.OpTrace() as trace:
            out = attention(q, k, v)
        _check_op_forward(where, kernel, out, trace, launched)
        with method.OpTrace() as trace:
            grads = torch.autograd.grad(out, (q, k, v), do, allow_unused=True)
        _check_op_backward(where, trace)
        want = attention_reference(q, k, v, is_causal=True, do=do)
        if check.relative_error(out, want[0]) > check.tolerance(dtype):
            hint = ""
            if torch.isnan(out).any():
                hint = " Some outputs are NaN: store every row (masked with offs_m < n_q)."
            elif n > 1 and check.relative_error(out, attention_reference(q, k, v)) <= check.tolerance(dtype):
                hint = " It is the non-causal output: query i sees keys j <= i only (task 5's mask and loop bound)."
            try:
                check.assert_close(out, want[0], dtype=dtype, name="O (causal)", context=where)
            except AssertionError as exc:
                raise AssertionError(f"{exc}{hint}") from None
        for name, got, ref in zip(("dq", "dk", "dv"), grads, want[1:]):
            if got is None:
                raise AssertionError(f"{where}: {name} is None: the backward returns (dq, dk, dv), in that order.")
            if tuple(got.shape) != tuple(ref.shape):
                raise AssertionError(f"{where}: {name} has shape {tuple(got.shape)}, expected {tuple(ref.shape)}.")
            if check.relative_error(got, ref) > check.tolerance(dtype):
                unmasked = _unmasked_backward(q, k, v, want[0], do)[("dq", "dk", "dv").index(name)]
                hint = (
                    " P was not masked: exp(scale Q K^T - lse) above the diagonal is not 0 by itself (lse sums only "
                    "the keys j <= i); set P = 0 there, as the forward's P was."
                    if n > 1 and check.relative_error(got, unmasked) <= 10 * check.tolerance(dtype)
                    else " The backward is task 3's algebra, with P = exp(scale Q K^T - lse) masked to 0 above the "
                    "diagonal and D = rowsum(dO o O)."
                )
                try:
                    check.assert_close(got, ref, dtype=dtype, name=name, context=where)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}{hint}") from None
    speed.grade_speed("attention op: forward and backward (CS336)", attention)
    return f"{cases} random shapes (and one in bf16 on a GPU), O and dQ, dK, dV against float64, causal"


def check_op_kernel_method(kernel) -> None:
    """:func:`check_forward_method` for the op's kernel (``lse_ptr`` after ``o_ptr``), compiled for bf16 at
    64 x 64 tiles of head dim 64, CS336's problem."""
    ir = method.ttir(kernel, _OP_SIGNATURE, {"HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64})
    looped = sorted(dot.out for dot in method.dots(ir) if dot.in_loop)
    if looped != [(64, 64), (64, 64)]:
        raise AssertionError(
            "the op's kernel, compiled for bf16 with 64 x 64 tiles of head dim 64, has tt.dot ops in its key loop of "
            f"shapes {looped or 'none'}; it makes two per key block: S = Q K^T and P V (cast P to V's dtype first: "
            "tl.dot(p.to(v.dtype), v))."
        )
    for op in method.loads_and_stores(ir):
        if not op.masked:
            raise AssertionError(
                f"the op's kernel has a tl.{op.kind} of a {list(op.shape)} tile without a mask; mask every tile "
                "(rows offs_m < n_q, keys cols < n_k), the log-sum-exp's store too."
            )
