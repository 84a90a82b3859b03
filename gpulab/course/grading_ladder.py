"""Graders for exercise 3 (the cuDNN ladder): step 1 (combined GEMMs), the fused LSTM pointwise kernel and the
wavefront schedule of step 6.

Each runs the learner's code on fresh random sizes against ``torch.nn.LSTM`` (float64) or the float64 cell
reference, and raises AssertionError with a message that says what to fix. On success it prints one deterministic
line (nbval compares it)."""

from __future__ import annotations

import copy

import torch

from gpulab import check, runtime
from gpulab.course import method, speed
from gpulab.course.grading import fresh_rng, grader, require_callable, require_kernel
from gpulab.rnn import cells, from_torch_lstm

# matrix products as aten runs them (torch.matmul, @, F.linear, einsum all end in one of these)
_PRODUCTS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "addmv", "dot", "linear")


@grader("step 1: combined GEMMs")
def grade_combined_gemm(step1, cases=4):
    """``step1(x, weights, state=None) -> (y, (h_n, c_n))`` must reproduce nn.LSTM with 2 products per cell. The
    method is read from the aten ops the call runs (a ``TorchDispatchMode`` trace): at most 2 and at least 1 matrix
    product per cell, and no library LSTM."""
    require_callable("step1", step1)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    sizes = [(1, 5, 3, 1, 1)] + [
        (rng.randint(1, 3), rng.randint(2, 24), rng.randint(1, 12), rng.randint(1, 4), rng.randint(1, 5))
        for _ in range(cases - 1)
    ]
    for layers, hidden, inp, batch, seq in sizes:
        torch.manual_seed(check.new_seed())
        m = torch.nn.LSTM(inp, hidden, num_layers=layers).eval()
        x = check.random_tensor(seq, batch, inp, device="cpu")
        state = tuple(check.random_tensor(layers, batch, hidden, device="cpu") for _ in range(2))
        with torch.no_grad():
            y_r, (h_r, c_r) = copy.deepcopy(m).double()(x.double(), tuple(s.double() for s in state))
        w = from_torch_lstm(m.to(runtime.device))
        where = f"layers={layers}, hidden={hidden}, input={inp}, batch={batch}, seq={seq}"
        with torch.no_grad(), method.OpTrace() as trace:
            out = step1(x.to(runtime.device), w, tuple(s.to(runtime.device) for s in state))
        if not isinstance(out, tuple) or len(out) != 2 or not isinstance(out[1], (tuple, list)) or len(out[1]) != 2:
            raise AssertionError(f"step1 returned {type(out).__name__}; return (y, (h_n, c_n)) like nn.LSTM.")
        y, (h, c) = out
        check.assert_close(y, y_r, dtype=torch.float32, name="y", context=where)
        check.assert_close(h, h_r, dtype=torch.float32, name="h_n", context=where)
        check.assert_close(c, c_r, dtype=torch.float32, name="c_n", context=where)
        cells_run = layers * seq
        library = [op for op in trace.ops if "lstm" in op or "rnn" in op or "gru" in op]
        if library:
            raise AssertionError(
                f"{where}: your function ran {library[0]}, a library LSTM: step 1 writes the cell loop itself, with "
                "the products of the gates and the pointwise update in PyTorch."
            )
        products = trace.count(*_PRODUCTS)
        if products > 2 * cells_run:
            raise AssertionError(
                f"{where}: {products} matrix products for {cells_run} cells; step 1 does 2 per cell: "
                "x_t @ W_ih.t() with all four gates' rows at once ([4H, I]) and h @ W_hh.t() ([4H, H])."
            )
        if products < cells_run:
            raise AssertionError(
                f"{where}: {products} matrix products for {cells_run} cells: every cell needs at least h @ W_hh.t() "
                "(the recurrence cannot be batched over time). Products written as (h[:, None, :] * W).sum(-1) run "
                "elementwise, not as a GEMM: use @ (torch.matmul)."
            )
    speed.grade_speed("step 1: combined GEMMs", step1)
    return f"{len(sizes)} random LSTMs, 2 products per cell"


@grader("fused LSTM pointwise kernel")
def grade_pointwise_kernel(kernel, cases=5):
    """``kernel[(N, cdiv(M, BLOCK))](gates, c, h_out, c_out, M, BLOCK=...)``: gates [N, 4, M] pre-activations
    (i, f, z, o), c [N, M] fp32; writes h_out [N, M] (gates' dtype) and c_out [N, M] (fp32), nothing else."""
    require_kernel("kernel", kernel)
    cases = runtime.positive_int("cases", cases)
    import triton

    rng, _ = fresh_rng()
    dtypes = [torch.float32, torch.float16]
    tried = 0
    for j in range(cases):
        n, m = rng.randint(1, 6), rng.choice([1, 7, 64, 100, 257])
        block = rng.choice([16, 64, 128])
        dtype = dtypes[j % 2]
        gates = check.random_tensor(n, 4, m, dtype=dtype, scale=2.0)
        c = check.random_tensor(n, m, dtype=torch.float32)
        h_buf = check.poisoned(n * m + block, dtype=dtype)  # anything written past n*m stays visible
        c_buf = check.poisoned(n * m + block, dtype=torch.float32)
        h_out, c_out = h_buf[: n * m].view(n, m), c_buf[: n * m].view(n, m)
        kernel[(n, triton.cdiv(m, block))](gates, c, h_out, c_out, m, BLOCK=block)
        h_ref, c_ref = cells.lstm_pointwise_reference(gates.view(n, 4, 1, m), c.view(n, 1, m))
        where = f"N={n}, M={m}, BLOCK={block}, {str(dtype).replace('torch.', '')}"
        try:
            # a lone element near 0 (c = f c + i z cancelling) has no relative precision: allow fp32 rounding of ~1
            check.assert_close(h_out, h_ref.view(n, m), name="h_out", context=where, atol=1e-6)
            check.assert_close(c_out, c_ref.view(n, m), dtype=dtype, name="c_out", context=where, atol=1e-6)
        except AssertionError as exc:
            i, f, z, o = gates.double().unbind(1)
            swapped = torch.sigmoid(o) * torch.tanh(torch.sigmoid(f) * c.double() + torch.sigmoid(i) * torch.tanh(z))
            hint = ""
            if torch.isnan(h_out).any():
                hint = " Some outputs were never written: mask with offs < M and cover every program's block."
            elif check.relative_error(h_out, swapped) > 1e-2:
                hint = (
                    " Gate g of row n starts at gates_ptr + n*4*M + g*M; the order is i, f, z, o; "
                    "c = sigmoid(f)*c + sigmoid(i)*tanh(z), h = sigmoid(o)*tanh(c)."
                )
            raise AssertionError(f"{exc}{hint}") from None
        if not (torch.isnan(h_buf[n * m :]).all() and torch.isnan(c_buf[n * m :]).all()):
            raise AssertionError(f"{where}: the kernel wrote past the end of h_out or c_out; mask the stores.")
        tried += 1
    return f"{tried} random sizes in fp32 and fp16, nothing written past the end"


@grader("wavefront schedule")
def grade_wavefront(schedule, cases=6):
    """``schedule(layers, steps) -> list of waves``, each wave a list of cells ``(layer, t)``: the order in which a
    stacked LSTM's cells can run when every cell in a wave runs at once (step 6 of the ladder). Cell (l, t) needs
    (l, t-1) (its own layer's previous state) and (l-1, t) (its input, from the layer below), both in earlier waves.
    Checked for structure: every cell exactly once, every dependency in an earlier wave, and the fewest waves
    (``layers + steps - 1``: each wave holds every cell that is ready)."""
    require_callable("schedule", schedule)
    cases = runtime.positive_int("cases", cases)
    rng, _ = fresh_rng()
    sizes = [(1, 1), (4, 100)][:cases] + [(rng.randint(1, 6), rng.randint(1, 12)) for _ in range(max(cases - 2, 0))]
    for n_l, n_t in sizes:
        where = f"schedule({n_l}, {n_t})"
        waves = schedule(n_l, n_t)
        if isinstance(waves, (str, bytes)) or not hasattr(waves, "__iter__"):
            raise AssertionError(f"{where} returned {type(waves).__name__}; return a list of waves (lists of cells).")
        wave_of = {}
        for k, wave in enumerate(waves):
            for cell in wave:
                cell = tuple(int(v) for v in cell)
                if len(cell) != 2 or not (0 <= cell[0] < n_l and 0 <= cell[1] < n_t):
                    raise AssertionError(f"{where}: wave {k} holds {cell}, not a cell (layer < {n_l}, t < {n_t}).")
                if cell in wave_of:
                    raise AssertionError(f"{where}: cell {cell} is in wave {wave_of[cell]} and again in wave {k}.")
                wave_of[cell] = k
        missing = [(l, t) for l in range(n_l) for t in range(n_t) if (l, t) not in wave_of]
        if missing:
            raise AssertionError(f"{where}: cells {missing[:4]} are in no wave; every (layer, t) runs once.")
        for (l, t), k in sorted(wave_of.items()):
            for dep, what in (((l, t - 1), "its own layer's previous state"), ((l - 1, t), "its input from below")):
                if dep in wave_of and wave_of[dep] >= k:
                    raise AssertionError(
                        f"{where}: cell {(l, t)} runs in wave {k} but needs {dep} ({what}), which runs in wave "
                        f"{wave_of[dep]}: a dependency must finish in an earlier wave."
                    )
        fewest = n_l + n_t - 1
        if len(waves) != fewest:
            serial = " one cell per wave is step 0's order;" if len(waves) == n_l * n_t > fewest else ""
            raise AssertionError(
                f"{where}: {len(waves)} waves, the fewest is layers + steps - 1 = {fewest}:{serial} every cell "
                "whose two dependencies are done can run, and those are the cells with the same layer + t."
            )
    return f"{len(sizes)} stacks (the article's 4 x 100 among them): each cell once, dependencies first, fewest waves"
