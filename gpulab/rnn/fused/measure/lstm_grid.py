"""``python -m gpulab bench 06 lstm-grid``: ``gpulab.rnn.LSTM`` where users are, against cuDNN's ``nn.LSTM``.

Every case is forward + backward (``for p in leaves: p.grad = None``; ``out.sum().backward()``), checked against
an ``nn.LSTM`` with the same weights (fp32, no TF32, on the first :data:`CHECK_T` steps: outputs, h_n, c_n, dW_ih)
before it is timed on both clocks (``ms`` device, ``wall_ms`` eager per call, calls back to back, one synchronize).
Records (``params['kind']``, ``provider``):

- ``grid``: one head, hidden :data:`HIDDEN` x layers (1, 2) x batch :data:`BATCH`, T 256, fp16: ``gpulab fp16``
  (fused backend), ``cuDNN fp16`` and ``cuDNN bf16`` (where this torch runs cuDNN in bf16);
- ``bidirectional``: 2 layers, hidden 768, B 64, T 256: the module's default choice (``join_directions=None``), one
  recurrence per direction (False) and both directions in one (True);
- ``packed``: one layer, hidden 512, B 64 sequences of mixed lengths (T up to 256): gpulab packed, gpulab on the
  padded batch of the same tokens, cuDNN packed, cuDNN padded;
- ``compile``: ``torch.compile(module)`` against the eager module (hidden 768, B 64, T 256; and the tiny call);
- ``tiny``: B 1, T 4, 2 heads of 64 (gpulab) against a dense cuDNN ``nn.LSTM(128, 128)``.

A case that fails (its check, or a compile) leaves a record with ``status`` saying why instead of stopping the run;
so does a case not begun within the time budget (:func:`lstm_grid`).
On CPU (Triton's interpreter) every kind runs once at tiny sizes: the path is checked, the times mean nothing.
"""

from __future__ import annotations

import contextlib
import time

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from gpulab import bench, check, runtime
from gpulab.rnn.module import LSTM

__all__ = ["lstm_grid", "lstm_large", "step_of", "check_against_torch", "HIDDEN", "BATCH", "LARGE", "CHECK_T"]

HIDDEN = (256, 512, 768, 1024, 1536)
BATCH = (16, 64, 256)
T_GRID = 256
LARGE = tuple((1536, B, L) for L in (1, 2) for B in BATCH) + tuple((H, 256, L) for H in (768, 1024) for L in (1, 2))
"""(hidden, batch, layers) of the grid's large heads and batches: every point of one head of 1536 (the two-piece
kernels up to 16 rows a launch) and B256 at 768 and 1024 (launches of fewer rows); :func:`lstm_large` times them."""
CHECK_T = 32  # steps of the check against nn.LSTM (a drift over 256 fp16 steps says nothing about correctness)


def _cudnn_dtypes() -> tuple:
    """fp16, and bf16 where cuDNN's LSTM runs in it here (tried once on a small problem)."""
    out = [torch.float16]
    if runtime.on_gpu():
        try:
            m = nn.LSTM(8, 8).to("cuda", torch.bfloat16)
            m(torch.randn(2, 1, 8, device="cuda", dtype=torch.bfloat16))[0].sum().backward()
            out.append(torch.bfloat16)
        except RuntimeError:
            pass
    return tuple(out)


def step_of(module, x, leaves):
    """forward + backward as a training loop makes it (gradients cleared to None first)."""

    def step():
        for t in leaves:
            t.grad = None
        out = module(x)[0]
        (out.data if isinstance(out, torch.nn.utils.rnn.PackedSequence) else out).sum().backward()

    return step


def check_against_torch(ours: LSTM, x: torch.Tensor, name: str, every_weight: bool = False) -> str:
    """ours (on x [B, T, I], batch_first) against an fp32 ``nn.LSTM`` with its weights, on the first CHECK_T steps;
    'ok' or an AssertionError. Several heads are compared with the vanilla backend in fp32 instead. The gradients
    checked: dx and dW_ih_l0, or with ``every_weight`` every parameter's."""
    xs = x[:, :CHECK_T].detach()
    if ours.num_heads == 1:
        ref = nn.LSTM(ours.input_size, ours.hidden_size, ours.num_layers, ours.bias, True, 0.0, ours.bidirectional,
                      ours.proj_size).to(x.device)  # fmt: skip
        ref.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})
    else:
        ref = LSTM(ours.input_size, ours.hidden_size, ours.num_layers, batch_first=True, num_heads=ours.num_heads,
                   backend="vanilla", bidirectional=ours.bidirectional).to(x.device)  # fmt: skip
        ref.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})
    ctx = bench.no_tf32() if runtime.on_gpu() else contextlib.nullcontext()
    with ctx:
        xr = xs.float().clone().requires_grad_()
        y_r, (h_r, c_r) = ref(xr)
        y_r.sum().backward()
    xo = xs.clone().requires_grad_()
    ours.zero_grad(set_to_none=True)
    y, (h, c) = ours(xo)
    y.sum().backward()
    for a, r, what in ((y, y_r, "output"), (h, h_r, "h_n"), (c, c_r, "c_n"), (xo.grad, xr.grad, "dx")):
        check.assert_close_drifting(a, r.double(), name=f"{name}: {what}")
    mine = dict(ours.named_parameters())
    for key, p in ref.named_parameters() if every_weight else [("weight_ih_l0", ref.weight_ih_l0)]:
        check.assert_close_drifting(mine[key].grad, p.grad.double(), name=f"{name}: d{key}")
    ours.zero_grad(set_to_none=True)
    return "ok"


def _flops(B, T, I, H, L, D=1) -> float:
    """forward + backward of the dense products (3x the forward's 2 B T 4H (I_l + H) per layer and direction)."""
    return 3.0 * sum(2.0 * B * T * 4 * H * ((I if layer == 0 else D * H) + H) * D for layer in range(L))


def _time(case, kind, provider, step, dtype, shape, flops=None, quick=False, **params):
    r = bench.measure(step, lesson="06", case=case, dtype=dtype, shape=shape, flops=flops, kind=kind,
                      warmup_ms=5.0 if quick else 25.0, rep_ms=5.0 if quick else 100.0, **params)  # fmt: skip
    r.provider = provider
    return r


def _guarded(case, kind, make) -> list:
    """``make()``'s records, or one record of why it failed (status): a failing case must not cost the others."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - recorded as the case's status
        r = bench.record(lesson="06", case=case, kind=kind, error=f"{type(exc).__name__}: {exc}"[:500])
        r.status = f"failed: {type(exc).__name__}"
        return [r]


def _pair(kind, label, B, T, I, H, L, bi, quick, cudnn_dtypes, num_heads=1, extra=None):
    """gpulab fp16 (checked) and cuDNN in each of ``cudnn_dtypes`` on the same problem."""
    dev, out = runtime.device, []
    dt = torch.float16 if runtime.on_gpu() else torch.float32
    torch.manual_seed(0)
    ours = LSTM(I, H, L, batch_first=True, bidirectional=bi, num_heads=num_heads, backend="fused").to(dev, dt)
    x = torch.randn(B, T, I, device=dev, dtype=dt, requires_grad=True)
    status = check_against_torch(ours, x, label)
    params = {"B": B, "T": T, "H": H, "layers": L, "bidirectional": bi, "heads": num_heads, **(extra or {})}
    fl = _flops(B, T, I, H, L, 2 if bi else 1) if num_heads == 1 else None
    step = step_of(ours, x, [x, *ours.parameters()])
    out.append(_time(f"{label} gpulab", kind, "gpulab fp16", step, dt, [B, T, H], fl, quick, check=status, **params))
    if bi:  # both choices forced: one recurrence per direction (two launches a layer), both in one
        for join, what in ((False, "per direction"), (True, "joined")):
            ours.join_directions = join
            status = check_against_torch(ours, x, f"{label} ({what})")
            out.append(_time(f"{label} gpulab {what}", kind, f"gpulab fp16 {what}", step, dt, [B, T, H], fl, quick,
                             check=status, **params))  # fmt: skip
        ours.join_directions = None
    if runtime.on_gpu():
        for cd in cudnn_dtypes:
            ref = nn.LSTM(I, H, L, batch_first=True, bidirectional=bi).to(dev, cd)
            xc = x.detach().to(cd).requires_grad_()
            name = f"cuDNN {str(cd).replace('torch.', '').replace('float16', 'fp16').replace('bfloat16', 'bf16')}"
            out.append(_time(f"{label} {name}", kind, name, step_of(ref, xc, [xc, *ref.parameters()]), cd, [B, T, H],
                             fl, quick, **params))  # fmt: skip
    return out


def _packed_leaf(x, lengths):
    """x [B, T, I] packed (unsorted lengths), its data a leaf: each timed step differentiates the same input."""
    p = pack_padded_sequence(x.detach(), lengths, batch_first=True, enforce_sorted=False)
    return p._replace(data=p.data.requires_grad_())


def _packed(quick, B, T, H):
    """gpulab packed vs gpulab padded (same tokens) vs cuDNN packed and padded, one layer."""
    dev, out = runtime.device, []
    dt = torch.float16 if runtime.on_gpu() else torch.float32
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(max(1, T // 4), T + 1, (B,), generator=g)
    lengths[0] = T
    torch.manual_seed(0)
    ours = LSTM(H, H, batch_first=True, backend="fused").to(dev, dt)
    x = torch.randn(B, T, H, device=dev, dtype=dt, requires_grad=True)
    check_against_torch(ours, x, "packed")
    packed = _packed_leaf(x, lengths)
    ref32 = nn.LSTM(H, H, batch_first=True).to(dev)
    ref32.load_state_dict({k: v.float() for k, v in ours.state_dict().items()})
    with torch.no_grad():  # the packed path against nn.LSTM's packed path
        y = ours(packed)[0].data
        y_r = ref32(pack_padded_sequence(x.float(), lengths, batch_first=True, enforce_sorted=False))[0].data
    check.assert_close_drifting(y, y_r.double(), name="packed output")
    tokens = int(lengths.sum())
    params = {"B": B, "T": T, "H": H, "layers": 1, "tokens": tokens}
    leaves = [x, *ours.parameters()]
    step = step_of(ours, packed, [packed.data, *leaves[1:]])
    out.append(_time("packed gpulab packed", "packed", "gpulab fp16 packed", step, dt, [B, T, H], None, quick,
                     check="ok", **params))  # fmt: skip
    out.append(_time("packed gpulab padded", "packed", "gpulab fp16 padded", step_of(ours, x, leaves), dt, [B, T, H],
                     None, quick, check="ok", **params))  # fmt: skip
    if runtime.on_gpu():
        ref = nn.LSTM(H, H, batch_first=True).to(dev, torch.float16)
        xc = x.detach().half().requires_grad_()
        pc = _packed_leaf(xc, lengths)
        cl = [xc, *ref.parameters()]
        step = step_of(ref, pc, [pc.data, *cl[1:]])
        out.append(_time("packed cuDNN packed", "packed", "cuDNN fp16 packed", step, torch.float16, [B, T, H], None,
                         quick, **params))  # fmt: skip
        out.append(_time("packed cuDNN padded", "packed", "cuDNN fp16 padded", step_of(ref, xc, cl), torch.float16,
                         [B, T, H], None, quick, **params))  # fmt: skip
    return out


def _compiled(quick, label, B, T, H, num_heads):
    """torch.compile(module) against the eager module: the compiled step's output checked against the eager one."""
    dev = runtime.device
    dt = torch.float16 if runtime.on_gpu() else torch.float32
    torch.manual_seed(0)
    ours = LSTM(H, H, batch_first=True, num_heads=num_heads, backend="fused").to(dev, dt)
    x = torch.randn(B, T, H, device=dev, dtype=dt, requires_grad=True)
    compiled = torch.compile(ours, backend="inductor" if runtime.on_gpu() else "aot_eager")
    with torch.no_grad():
        check.assert_close(compiled(x)[0], ours(x)[0].double(), dtype=dt, name=f"{label}: compiled vs eager")
    leaves, params = [x, *ours.parameters()], {"B": B, "T": T, "H": H, "heads": num_heads}
    return [
        _time(f"{label} eager", "compile", "gpulab eager", step_of(ours, x, leaves), dt, [B, T, H], None, quick,
              check="ok", **params),
        _time(f"{label} compiled", "compile", "gpulab compiled", step_of(compiled, x, leaves), dt, [B, T, H], None,
              quick, check="ok", **params),
    ]  # fmt: skip


def lstm_large(progress=None, quick=None, budget_s: float = 240.0):
    """``python -m gpulab bench 06 lstm-large``: the ``grid`` records of :data:`LARGE` only (gpulab and cuDNN, checked
    and timed as :func:`lstm_grid` times them); ``quick`` as there."""
    return lstm_grid(progress, quick, budget_s, points=LARGE)


def lstm_grid(progress=None, quick=None, budget_s: float = 280.0, points=None):
    """Every case of the module docstring; ``quick`` (default: on CPU) runs one tiny size of each kind. A case not
    begun within ``budget_s`` seconds of the start (kernel compilations included) leaves a record with status
    'skipped: time budget', so that the part ends in about five minutes on any GPU. ``points``: (hidden, batch,
    layers) of the ``grid`` kind to run instead of the whole grid and the other kinds (None: everything)."""
    quick = (not runtime.on_gpu()) if quick is None else runtime.strict_bool("quick", quick)
    budget_s = runtime.finite_float("budget_s", budget_s, positive=True)
    start = time.perf_counter()
    progress = progress or (lambda it: it)
    cudnn = _cudnn_dtypes()
    if points is not None:
        points = [tuple(runtime.positive_int(n, v) for n, v in zip(("hidden", "batch", "layers"), p)) for p in points]
    if quick:
        grid = [(16, 2, L) for L in (1, 2)]
        T, bi_case, packed_case, compile_case = 3, (2, 3, 16), (3, 4, 16), (2, 3, 16, 1)
    else:
        grid = [(H, B, L) for H in HIDDEN for L in (1, 2) for B in BATCH]
        T, bi_case, packed_case, compile_case = T_GRID, (64, T_GRID, 768), (64, T_GRID, 512), (64, T_GRID, 768, 1)
    tiny = (1, 4, 128, 2) if runtime.on_gpu() else (1, 3, 32, 2)
    grid = grid if points is None or quick else points
    jobs = [(f"grid H{H} L{L} B{B}", "grid", lambda H=H, B=B, L=L: _pair(
        "grid", f"grid H{H} L{L} B{B}", B, T, H, H, L, False, quick, cudnn)) for H, B, L in grid]  # fmt: skip
    if points is not None:
        return _run(jobs, start, budget_s, progress)
    B, Tb, H = bi_case
    jobs.append((f"bidirectional H{H} L2 B{B}", "bidirectional", lambda: _pair(
        "bidirectional", f"bidirectional H{H} L2 B{B}", B, Tb, H, H, 2, True, quick, cudnn)))  # fmt: skip
    jobs.append(("packed", "packed", lambda: _packed(quick, *packed_case)))
    jobs.append(("tiny", "tiny", lambda: _pair("tiny", "tiny B1 T4 2x64", tiny[0], tiny[1], tiny[2], tiny[2], 1,
                                               False, quick, (torch.float16,), num_heads=tiny[3])))  # fmt: skip
    B, Tc, H, nh = compile_case
    jobs.append((f"compile H{H} B{B}", "compile", lambda: _compiled(quick, f"compile H{H} B{B}", B, Tc, H, nh)))
    jobs.append(
        ("compile tiny", "compile", lambda: _compiled(quick, "compile tiny", tiny[0], tiny[1], tiny[2], tiny[3]))
    )
    return _run(jobs, start, budget_s, progress)


def _run(jobs, start, budget_s, progress) -> list:
    out = []
    for case, kind, make in progress(jobs):
        if time.perf_counter() - start > budget_s:
            r = bench.record(lesson="06", case=case, kind=kind, budget_s=budget_s)
            r.status = "skipped: time budget"
            out.append(r)
            continue
        out += _guarded(case, kind, make) if runtime.on_gpu() else make()
    return out
