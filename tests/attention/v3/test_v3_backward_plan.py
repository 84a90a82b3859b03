"""The plan and version 3's backward: chosen only at head dims where the records show it taking less time than the
shipped backward, and never where it cannot run (here: no sm_90 GPU)."""

import re

import pytest
import torch

from gpulab import bench, runtime
from gpulab.attention import plan
from gpulab.attention.measure import v3_backward_report as report


def test_gate_matches_the_records():
    """Every head dim in V3_BACKWARD_HEAD_DIMS has a record run where version 3's best step took less time than the
    shipped backward (forward+backward) on every problem at that head dim."""
    runs = [r for r in report.runs() if r >= "b"]
    assert runs, "no records of version 3's backward"
    for d in plan.V3_BACKWARD_HEAD_DIMS:
        ok = False
        for run in runs:
            best = report.best(report.stored(run, "time"))
            steps = {i for row in best.values() for i in row if i.startswith("gpulab v3 bwd")}
            ok |= any(min(report.ratios(best, s, peer=report.SHIPPED, head_dim=d), default=0) > 1 for s in steps)
        assert ok, f"head dim {d} is in V3_BACKWARD_HEAD_DIMS but no record shows version 3's backward ahead there"


def _gated_backward(gate):
    """The launches ``gate`` chooses for a causal problem of 20 queries, head dim 64, and the gradients they give."""
    plan.clear_plan_cache()
    gen = torch.Generator(device=runtime.device).manual_seed(0)
    q, k, v, do = (torch.randn(1, 1, 20, 64, device=runtime.device, generator=gen) for _ in "qkvo")
    p = plan.forward_plan(q, k, v, is_causal=True)
    o, lse = plan.run_forward(p, q, k, v)
    launches = plan.backward_launches(p, q, k, v, o, lse, do, gate)
    grads = plan.run_backward(p, do, q, k, v, o, lse, launches=launches)
    assert p.backward is None  # another gate's launches are for that call only: the cached plan keeps its own
    plan.clear_plan_cache()
    return plan.launch_kind(launches), grads


def test_switch_on_without_sm90_takes_the_two_kernels():
    gate = plan.BackwardGate(head_dims=(64,))
    assert gate.takes_v3(64, True, 20, 20) and not plan.V3_BACKWARD.takes_v3(64, True, 20, 20)
    kind, grads = _gated_backward(gate)
    assert kind == "two kernels"
    assert all(torch.isfinite(g).all() for g in grads)


def test_measured_default_is_the_fastest_step_of_the_run_that_timed_the_ladder_last():
    """backward_configs.MEASURED (query lengths over SHORT_SEQ) and MEASURED_SHORT (up to it; a head dim missing
    there: MEASURED's step) pick, per head dim, the step with the highest median speed relative to cuDNN (device
    time) on those problems of the latest record run that timed several steps, each on the whole grid (runs h and i
    timed only each problem's default, with and without steps 8-10: not a ladder)."""
    from gpulab.attention.v3 import backward_configs as bc

    ladder = None
    for run in report.runs():
        best = report.best(report.stored(run, "time"))
        steps = {i for row in best.values() for i in row if i.startswith("gpulab v3 bwd step")}
        if len(steps) > 1 and len(best) == 24 and all(all(s in row for s in steps) for row in best.values()):
            ladder = (run, best, steps)
    assert ladder, "no record run timed several steps of version 3's backward on the whole grid"
    run, best, steps = ladder
    for d in (64, 128):
        for short in (False, True):
            rows = {key: row for key, row in best.items() if (key[2] <= bc.SHORT_SEQ) == short}
            medians = {s: report.spread(report.ratios(rows, s, head_dim=d))[0] for s in steps}
            cfg = bc.MEASURED_SHORT.get(d, bc.MEASURED[d]) if short else bc.MEASURED[d]
            assert f"gpulab v3 bwd step {cfg.step}" == max(medians, key=medians.get), (run, d, short, medians)


def _newest_run(timed_beside, what):
    """(run, best rows) of the newest record run in which some row has an implementation ``i`` with
    ``timed_beside(i, row)`` true (a setting timed beside the same config without it)."""
    newest = None
    for run in report.runs():
        best = report.best(report.stored(run, "time"))
        if any(timed_beside(i, row) for row in best.values() for i in row):
            newest = (run, best)
    assert newest, f"no record run timed {what}"
    return newest


def _classes(best):
    """Per head dim and length class (up to SHORT_SEQ or longer): (d, short, the default config, its rows)."""
    from gpulab.attention.v3 import backward_configs as bc

    for d in (64, 128):
        for short in (False, True):
            cfg = bc.MEASURED_SHORT.get(d, bc.MEASURED[d]) if short else bc.MEASURED[d]
            yield d, short, cfg, {k: r for k, r in best.items() if k[1] == d and (k[2] <= bc.SHORT_SEQ) == short}


def test_kv_regs_default_is_the_fastest_setting_of_the_newest_step10_run():
    """Step 10: MEASURED's and MEASURED_SHORT's ``kv_regs`` is, per head dim and length class, the setting with the
    highest median speed relative to cuDNN (device time) among those the newest run that timed step 10 ran on every
    problem of that class beside the default's step without it; where that is not "none", it took less time than
    the step without it on every one of those problems."""
    # a step-10 run timed some step with K/V in registers beside the same step without (from run k the d=64
    # defaults are named "step 5+kv" / "step 7+kv" on their own: not a step-10 comparison)
    run, best = _newest_run(lambda i, row: re.search(r"step \d\+(k|v|kv)$", i) and i.rsplit("+", 1)[0] in row,
                            "step 10 (kv_regs)")  # fmt: skip
    for d, short, cfg, rows in _classes(best):
        base = f"gpulab v3 bwd step {cfg.step}"
        names = {"none": base, **{t: f"{base}+{t}" for t in ("k", "v", "kv")}}
        timed = {t: n for t, n in names.items() if all(n in row for row in rows.values())}
        assert "none" in timed and len(timed) > 1, (run, d, short, timed)
        medians = {t: report.spread(report.ratios(rows, n))[0] for t, n in timed.items()}
        assert cfg.kv_regs == max(medians, key=medians.get), (run, d, short, medians)
        if cfg.kv_regs != "none":
            assert min(report.ratios(rows, timed[cfg.kv_regs], peer=base)) > 1, (run, d, short)


def test_stats_smem_default_is_the_faster_setting_of_the_newest_step11_run():
    """Step 11: MEASURED's and MEASURED_SHORT's ``stats_smem`` is on where, per head dim and length class, the newest
    run that timed the default's step with and without it on every problem of that class measured the higher
    median speed relative to cuDNN (device time) with it, and off where without."""
    run, best = _newest_run(lambda i, row: i.endswith("+11") and i[: -len("+11")] in row, "step 11 (stats_smem)")
    for d, short, cfg, rows in _classes(best):
        kv = f"+{cfg.kv_regs}" if cfg.kv_regs != "none" else ""
        base = f"gpulab v3 bwd step {cfg.step}{kv}"
        assert all(base in row and base + "+11" in row for row in rows.values()), (run, d, short)
        on, off = (report.spread(report.ratios(rows, n))[0] for n in (base + "+11", base))
        assert cfg.stats_smem == (on > off), (run, d, short, on, off)


def test_backward_config_takes_the_short_default_up_to_short_seq():
    from gpulab.attention.v3 import backward_configs as bc

    for d in (64, 128):
        assert bc.backward_config(d) == bc.backward_config(d, seq=bc.SHORT_SEQ + 1) == bc.MEASURED[d]
        assert bc.backward_config(d, True, seq=bc.SHORT_SEQ) == bc.MEASURED_SHORT.get(d, bc.MEASURED[d])
        assert bc.backward_config(d, seq=1, step=3).step == 3


def test_backward_plan_is_worked_out_once_from_the_shapes():
    from gpulab.attention.v3.backward_launch import BackwardPlan

    q, k = torch.zeros(2, 3, 300, 64), torch.zeros(2, 3, 517, 64)
    p = BackwardPlan(None, q, k, 0.125, 128, 168, {"HEAD_DIM": 64}, None)
    assert (p.n_q, p.n_k, p.d, p.bh, p.grid) == (300, 517, 64, 6, (5, 6))
    assert p.raw is None  # the C launcher is kept only after a first launch through Triton


def _default_impl(d: int, seq: int) -> str:
    """The records' name of version 3's measured default at head dim ``d`` and query length ``seq``."""
    from gpulab.attention.v3 import backward_configs

    cfg = backward_configs.backward_config(d, seq=seq)
    kv = f"+{cfg.kv_regs}" if cfg.kv_regs != "none" else ""  # step 10, as gpu_v3_backward.py names it
    kv += "+11" if cfg.stats_smem else ""  # step 11
    return f"gpulab v3 bwd step {cfg.step}{kv}" + (f", {cfg.stages} stages" if cfg.stages != 2 else "")


def test_min_seq_matches_the_newest_runs():
    """V3_BACKWARD_MIN_SEQ is 1024 (lesson 4's shortest length) for every (head dim, causal) that the newest H200
    ``bench 05 short`` record timed at N = 1024, where version 3's backward ('gpulab bwd v3', checked) took less device
    time than the two kernels ('gpulab bwd v1 ...', the shipped tiles); and never above the H100 runs' table (the
    newest three runs that timed both on all 24 problems, the longest of their three lengths)."""
    tables = []
    for run in report.runs():
        best = report.best(report.stored(run, "time"))
        if len(best) == 24 and all(_default_impl(key[1], key[2]) in row and report.SHIPPED in row
                                   for key, row in best.items()):  # fmt: skip
            rows = {key: {"default": row[_default_impl(key[1], key[2])], report.SHIPPED: row[report.SHIPPED]}
                    for key, row in best.items()}  # fmt: skip
            tables.append((run, report.min_seq_table(rows, "default")))
    assert len(tables) >= 3, f"fewer than three record runs timed the default and the shipped backward: {tables}"
    newest = [t for _, t in tables[-3:]]
    h100 = {k: max(t[k] for t in newest) for k in set.intersection(*(set(t) for t in newest))}
    try:
        records = bench.load("05", path=bench.current("05", "short", "h200"))
    except FileNotFoundError:
        pytest.skip("no H200 short records in this checkout")
    times: dict[tuple, dict] = {}
    for r in records:
        p = r.params
        if p.get("direction") == "forward+backward" and p.get("seq") == 1024 and r.status == "ok" and r.ms == r.ms:
            times.setdefault((p["head_dim"], bool(p["causal"]), p.get("dtype", r.dtype)), {})[r.provider] = r.ms
    faster = {}
    for (d, causal, _), row in times.items():
        v1 = [ms for name, ms in row.items() if name.startswith("gpulab bwd v1") and "heads-first" not in name]
        if "gpulab bwd v3" in row and v1:
            faster[d, causal] = faster.get((d, causal), True) and row["gpulab bwd v3"] < v1[0]
    assert faster, times
    for key, ms in plan.V3_BACKWARD_MIN_SEQ.items():
        assert ms <= h100.get(key, 1 << 62), (key, ms, h100)
        if ms < h100.get(key, 1 << 62):
            assert ms == 1024 and faster.get(key), (key, faster)


def test_min_seq_table_reads_the_longest_lengths_first():
    def row(ours, theirs):
        return {"v3": {"ms": ours}, report.SHIPPED: {"ms": theirs}}

    best = {("bf16", 64, 1024, False): row(2, 1), ("bf16", 64, 4096, False): row(1, 2),
            ("bf16", 64, 16384, False): row(1, 2), ("bf16", 64, 1024, True): row(1, 2),
            ("bf16", 64, 4096, True): row(2, 1), ("bf16", 64, 16384, True): row(1, 2),
            ("bf16", 128, 16384, True): row(2, 1)}  # fmt: skip
    assert report.min_seq_table(best, "v3") == {(64, False): 4096, (64, True): 16384}


def test_min_seq_takes_version_3_only_from_its_length():
    """The gate: version 3 from min(Nq, Nk) on against the table (here without an sm_90 GPU, the two kernels
    always: version 3 cannot run)."""
    gate = plan.BackwardGate(min_seq={(64, True): 16})
    assert gate.takes_v3(64, True, 16, 20) and not gate.takes_v3(64, True, 20, 15)
    assert not gate.takes_v3(64, False, 20, 20) and not gate.takes_v3(128, True, 20, 20)
    kind, grads = _gated_backward(gate)
    assert kind == "two kernels" and all(torch.isfinite(g).all() for g in grads)
    with pytest.raises(TypeError, match="min_seq"):
        plan.BackwardGate(min_seq={64: 16})
    with pytest.raises(TypeError, match="head_dims"):
        plan.BackwardGate(head_dims=[64])
    with pytest.raises(TypeError, match="gate"):
        plan.backward_launches(None, None, None, None, None, None, None, gate={(64, True): 16})
    with pytest.raises(TypeError):
        plan.V3_BACKWARD_MIN_SEQ[(64, True)] = 16  # read-only: a gate is passed in, never patched
