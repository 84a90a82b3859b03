"""What lesson 5's version-6 run scripts share (``bench05_v6_wide.py``, ``bench05_v6_tiles.py``,
``bench05_v6_rows8.py``, ``diag05_v6.py``): a version-6 forward checked and clock-stamped, a printed line per record,
a case that fails left as a record instead of stopping the run, the training loop's step through ``flashrnn`` (timed
per version of the split kernels), and cuDNN's fp16 ``nn.LSTM`` timed in the same run. Imported by those scripts from
this folder (``python scripts/<script>.py`` puts it on the path)."""

import contextlib
import functools
import math
import time

import torch

from gpulab import bench, check, rnn, runtime
from gpulab.rnn.fused import clocks, plan, split_backward
from gpulab.rnn.fused.benchmark import dense_run


def line(r, t0):
    """Print one record: case, both clocks, status, its clock parts if stamped, seconds since ``t0``."""
    print(f"{r.case:55s} {r.ms or math.nan:8.3f} ms wall {r.wall_ms or math.nan:8.3f} {r.status[:200]} "
          f"{r.params.get('parts', '')} {time.time() - t0:.0f}s", flush=True)  # fmt: skip


def guard(rows, t0, case, common, fn):
    """Append ``fn()``'s record to ``rows``, or, if it raises, an ``error <case>`` record with the error as its
    status (the next case still runs); print it."""
    try:
        r = fn()
    except Exception as exc:  # noqa: BLE001 - recorded; the next case still runs
        r = bench.record(case=f"error {case}", **{k: v for k, v in common.items() if k != "dtype"})
        r.status = f"error: {type(exc).__name__}: {str(exc)[:400]}"
    rows.append(r)
    line(r, t0)


def checked_and_stamped(forward, ref, programs, poison=False):
    """``forward(**kw)``: one version-6 forward launch (``split_forward_v6`` with its inputs and tile bound). Its
    states checked against the float64 ``ref`` (outputs poisoned first if ``poison``), a second launch for the same
    bits, a third with clock stamps (``programs`` of them): returns (relative error, mean ns per step of each part,
    :func:`gpulab.rnn.fused.clocks.step_parts`)."""
    with runtime.poisoning(True) if poison else contextlib.nullcontext():
        out = forward()[0]
    err = check.assert_close_drifting(out, ref, name="states")
    assert torch.equal(forward()[0], out), "a second launch differs"
    stamps = clocks.clock_buffer(programs, out.shape[2], out.device)
    forward(clocks=stamps)
    torch.cuda.synchronize()
    return err, {k: round(v, 1) for k, v in clocks.step_parts(stamps).items()}


def loop_step(x):
    """A training loop's step on fresh leaves copied from ``x`` (Wx, R, b, states): the gradients cleared,
    ``flashrnn``'s fused backend forward, ``out.sum().backward()``. Returns ``(step, leaves)``."""
    leaves = [t.detach().clone().requires_grad_(True) for t in x]

    def step():
        for p in leaves:
            p.grad = None
        o, _ = rnn.flashrnn(*leaves, function="lstm", backend="fused")
        o.sum().backward()

    return step, leaves


def b3_reference(rows, t0, x, chosen, common):
    """Version 5's forward (``chosen``: the plan's split tiles) saving its gates, a random dL/d(states) (seed 2), and
    b3's backward on them: the reference b4 is checked against. b3 is timed into ``rows``. Returns ``(bargs, dG,
    d_states)`` with ``bargs`` = (d_out, gates, out, states, R), the backward's arguments."""
    out, _, gates = plan.split_forward_at(*x, chosen.tiling, save_gates=True)
    torch.manual_seed(2)
    d_out = torch.randn_like(out)
    bargs = (d_out, gates, out, x[3], x[1])
    dG, ds0 = split_backward.split_rnn_backward(*bargs, "lstm", tiling=chosen.backward)
    fn = functools.partial(split_backward.split_rnn_backward, *bargs, "lstm", tiling=chosen.backward)
    B, DH = x[0].shape[0], x[0].shape[-1]
    guard(rows, t0, "b3", common, lambda: bench.measure(fn, case=f"b3 split backward B{B} 1x{DH}", version="b3",
                                                         **common))  # fmt: skip
    return bargs, dG, ds0


def called_per_version(rows, t0, x, common, versions=("v5", "v6")):
    """Forward and backward as a training loop calls them (:func:`loop_step`), the plan's split kernels set to each
    of ``versions`` in turn (``plan.split_version_as``), checked finite and timed, appended to ``rows``; the plan's
    choices are cleared after."""
    step, leaves = loop_step(x)
    B, DH = x[0].shape[0], x[0].shape[-1]
    for version in versions:

        def called(version=version):
            with plan.split_version_as(version):
                plan.clear_cache()
                step()
                assert all(torch.isfinite(p.grad).all() for p in leaves), "non-finite gradient"
                return bench.measure(step, case=f"flashrnn fused {version} fwd+bwd as called B{B} 1x{DH}",
                                     version=version, direction="forward+backward as called", **common)  # fmt: skip

        guard(rows, t0, f"called {version}", common, called)
    plan.clear_cache()


def cudnn_rows(rows, t0, B, T, DH, device, kind):
    """cuDNN's fp16 ``nn.LSTM`` (dense ``DH``, input projection included) forward and forward+backward, timed and
    appended to ``rows``."""
    m = torch.nn.LSTM(DH, DH).to(device, torch.float16)
    xi = torch.randn(T, B, DH, device=device, dtype=torch.float16)
    for training in (False, True):
        rows.append(bench.measure(lambda tr=training: dense_run(xi, m, tr), lesson="05", dtype=torch.float16,
                                  kind=kind, case=f"cuDNN fp16 {'fwd+bwd' if training else 'forward'} B{B} dense {DH}",
                                  B=B, T=T, NH=1, DH=DH, training=training))  # fmt: skip
        line(rows[-1], t0)


def batches_saved(out_dir, part, one_batch, batches=(16, 32), tag="a"):
    """``one_batch(rows, t0, *args)`` for each item of ``batches`` (a batch size, or a tuple of arguments), then
    the rows saved as lesson 05 records in ``out_dir/<gpu>-<date>-<TAG>-<part>.jsonl`` (TAG from the environment,
    else ``tag``); prints the path."""
    import os  # noqa: PLC0415

    from gpulab import hardware  # noqa: PLC0415

    rows, t0 = [], time.time()
    for args in batches:
        one_batch(rows, t0, *(args if isinstance(args, tuple) else (args,)))
    path = os.path.join(out_dir, f"{hardware.gpu_slug(rows[0].device)}-{rows[0].date}-"
                                 f"{os.environ.get('TAG', tag)}-{part}.jsonl")  # fmt: skip
    bench.save(rows, "05", path=path)
    print(path)
