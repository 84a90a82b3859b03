"""gpulab.rnn.fused.measure.split_report: the split kernel's stored records as tables and a figure."""

import json

import pytest

from gpulab.rnn.fused.measure import split_report


def _write(tmp_path, rows):
    folder = tmp_path / "07_rnn_split" / "split"
    folder.mkdir(parents=True)
    path = folder / "nvidia-h100-80gb-hbm3-2030-01-01-split.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


ROWS = [
    {"kind": "env", "device": "NVIDIA H100 80GB HBM3", "torch": "t", "triton": "3.6.0", "date": "2030-01-01"},
    {"kind": "time", "case": "fused split (chosen)", "DH": 768, "ms": 3.0, "wall_ms": 3.3},
    {"kind": "time", "case": "cuDNN nn.LSTM float16", "DH": 768, "ms": 2.0, "wall_ms": 2.2},
    {"kind": "time", "case": "fused split fwd+bwd", "DH": 768, "ms": 9.0, "wall_ms": 9.9, "pass_": "fwd+bwd"},
    {"kind": "time", "case": "cuDNN nn.LSTM float16 fwd+bwd", "DH": 768, "ms": 6.0, "wall_ms": 6.6, "pass_": "fwd+bwd"},
    {"kind": "sweep", "DH": 768, "block_u": 8, "split": 96, "warps": 2, "ms": 2.048, "no_barrier_ms": 1.024},
]


def test_tables_come_from_the_records(tmp_path):
    rows = split_report.load_split("h100", root=_write(tmp_path, ROWS))
    table = split_report.split_table(rows)
    assert "2030-01-01" in table and "1.50x" in table  # forward: 3.3 / 2.2 on the wall clock
    assert "fwd+bwd" in table and "1.50x" in table.splitlines()[-1]  # 9.9 / 6.6
    budget = split_report.step_budget(rows, 768)
    assert "2000" in budget and "1000" in budget  # 2.048 ms / 1024 steps; half of it without the barrier
    fig = split_report.plot_split(rows)
    assert len(fig.axes) == 2


def test_crossover_table_names_the_fastest_on_the_wall_clock():
    rows = [
        {"kind": "env", "device": "NVIDIA H100 80GB HBM3"},
        {"kind": "cross", "DH": 128, "B": 4, "case": "split", "ms": 1.0, "wall_ms": 1.2},
        {"kind": "cross", "DH": 128, "B": 4, "case": "one-SM fused", "ms": 1.1, "wall_ms": 1.5},
        {"kind": "cross", "DH": 128, "B": 4, "case": "alternating", "ms": 9.0, "wall_ms": 12.0},
        {"kind": "cross", "DH": 768, "B": 4, "case": "split", "ms": 3.0, "wall_ms": 3.0},
        {"kind": "cross", "DH": 768, "B": 4, "case": "alternating", "ms": 30.0, "wall_ms": 45.0},
    ]
    lines = split_report.crossover_table(rows).splitlines()
    assert lines[2].split()[:2] == ["128", "4"] and lines[2].endswith("split, 1.25x the runner-up's speed")  # 1.5/1.2
    assert lines[3].endswith("split, 15.00x the runner-up's speed") and " - " in lines[3]  # no one-SM fit at 768
    with pytest.raises(ValueError, match="record='cross'"):
        split_report.crossover_table(ROWS)


def test_the_stored_h100_record_reads():
    rows = split_report.load_split("h100")
    assert rows[0]["kind"] == "env" and "H100" in rows[0]["device"]
    assert "768" in split_report.split_table(rows) and "barrier" in split_report.step_budget(rows)
    cross = split_report.load_split("h100", record="cross")
    assert {r["case"] for r in cross if r["kind"] == "cross"} == {"split", "one-SM fused", "alternating"}


def test_load_split_reads_split_paths_file_the_newest_of_that_gpu(tmp_path):
    """load_split reads split_path's file: that GPU's newest (a name sort over the folder, as the README's generator
    once cited it, takes another GPU's file when its name sorts last)."""
    folder = _write(tmp_path, ROWS) / "07_rnn_split" / "split"
    for name in ("nvidia-h100-80gb-hbm3-2030-01-02-split", "nvidia-l4-2030-01-03-split"):
        (folder / f"{name}.jsonl").write_text(json.dumps({**ROWS[0], "date": name[-16:-6]}) + "\n")
    path = split_report.split_path("h100", root=tmp_path)
    assert path.name == "nvidia-h100-80gb-hbm3-2030-01-02-split.jsonl", path
    assert max(folder.glob("*-split.jsonl")).name.startswith("nvidia-l4")  # what the name sort would have taken
    assert split_report.load_split("h100", root=tmp_path)[0]["date"] == "2030-01-02"
    assert split_report.load_split("l4", root=tmp_path)[0]["date"] == "2030-01-03"


def test_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench 07 split"):
        split_report.load_split("h100", root=tmp_path)
    with pytest.raises(TypeError, match="gpu"):
        split_report.load_split(100)
    with pytest.raises(ValueError, match="record must be one of"):
        split_report.load_split("h100", record="splits")
    with pytest.raises(TypeError, match="rows"):
        split_report.split_table("rows")
    with pytest.raises(TypeError, match="rows"):
        split_report.plot_split([])
    with pytest.raises(ValueError, match="head_dim=512"):
        split_report.step_budget(ROWS, 512)
    with pytest.raises(ValueError, match="head_dim"):
        split_report.step_budget(ROWS, 0)


def test_warps_table_sets_the_pick_beside_the_fastest(tmp_path):
    rows = [
        {"kind": "env", "device": "NVIDIA H100 80GB HBM3", "date": "2030-01-01"},
        *[
            {
                "kind": "candidate",
                "B": 32,
                "NH": 4,
                "DH": 192,
                "direction": "forward",
                "block_u": 16,
                "block_b": 16,
                "warps": w,
                "ms": ms,
                "chosen": w == 2,
            }  # fmt: skip
            for w, ms in ((2, 2.4), (4, 2.1), (8, 2.0))
        ],
        {
            "kind": "candidate",
            "B": 32,
            "NH": 4,
            "DH": 192,
            "direction": "forward",
            "block_u": 32,
            "block_b": 16,
            "warps": 4,
            "ms": 1.9,
            "chosen": False,
        },  # fmt: skip
        {
            "kind": "candidate",
            "B": 32,
            "NH": 4,
            "DH": 192,
            "direction": "forward",
            "block_u": 8,
            "block_b": 16,
            "warps": 2,
            "error": "no launch",
            "chosen": False,
        },  # fmt: skip
    ]
    folder = tmp_path / "07_rnn_split" / "split"
    folder.mkdir(parents=True)
    (folder / "nvidia-h100-80gb-hbm3-2030-01-01-candidates.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    loaded = split_report.load_split("h100", root=tmp_path, record="candidates")
    line = split_report.warps_table(loaded).splitlines()[-1]
    assert "2.40 (16x16, 2w)" in line and "2.00 (16x16, 8w)" in line and "1.90 (32x16, 4w)" in line, line
    with pytest.raises(ValueError, match="no 'candidate' rows"):
        split_report.warps_table([rows[0]])


def test_backward_table_compares_the_two_exchanges_per_problem(tmp_path):
    def cand(kernel, warps, ms, chosen=False, DH=768):
        return {"kind": "candidate", "kernel": kernel, "B": 16, "NH": 1, "DH": DH, "block_u": 16, "block_b": 16,
                "warps": warps, "ms": ms, "chosen": chosen}  # fmt: skip

    rows = [
        {"kind": "env", "device": "NVIDIA H100 80GB HBM3", "date": "2030-01-01"},
        cand("exchange dG", 2, 7.2),
        cand("exchange dG", 4, 8.4),
        cand("partials", 4, 4.0, chosen=True),
        cand("partials", 8, 3.6),
        cand("partials", 8, 4.4, chosen=True, DH=1024),
        {"kind": "candidate", "kernel": "exchange dG", "B": 16, "NH": 1, "DH": 1024, "error": "out of resource"},
        {"kind": "fwd+bwd", "B": 16, "NH": 1, "DH": 768, "case": "gpulab fused", "ms": 6.5, "wall_ms": 6.6},
    ]
    folder = tmp_path / "07_rnn_split" / "split"
    folder.mkdir(parents=True)
    (folder / "nvidia-h100-80gb-hbm3-2030-01-01-partials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = split_report.backward_table(split_report.load_split("h100", root=tmp_path, record="partials"))
    lines = table.splitlines()
    at_768 = next(line for line in lines if "1x768" in line)
    assert "7.20 ( 7.0 us)" in at_768 and "4.00 ( 3.9 us)" in at_768 and "3.60 ( 3.5 us)" in at_768, at_768
    assert at_768.rstrip().endswith("1.80x")  # the dG exchange's best (2 warps) over the pick
    at_1024 = next(line for line in lines if "1x1024" in line)
    assert at_1024.split()[2] == "-" and at_1024.rstrip().endswith("-")  # no dG exchange fits there
    assert "gpulab fused" in lines[-1] and "6.60 ms wall" in lines[-1] and "2030-01-01" in lines[0]
    train = split_report.training_rows(rows)
    assert list(train) == ["gpulab fused"] and train["gpulab fused"]["wall_ms"] == 6.6
    assert set(split_report.training_rows(split_report.load_split("h100", record="partials"))) == {
        "gpulab fused", "cuDNN nn.LSTM float16", "cuDNN nn.LSTM bfloat16"}  # fmt: skip
    with pytest.raises(ValueError, match="no 'fwd\\+bwd' rows"):
        split_report.training_rows(rows[:-1])
    with pytest.raises(ValueError, match="no backward 'candidate' rows"):
        split_report.backward_table([rows[0]])
    with pytest.raises(ValueError, match="steps"):
        split_report.backward_table(rows, steps=0)
    with pytest.raises(FileNotFoundError, match="not kept"):
        split_report.load_split("h100", root=tmp_path, record="parts")
    with pytest.raises(FileNotFoundError, match="bench 07 partials"):
        split_report.split_path("h200", root=tmp_path, record="partials")


def test_parts_exchange_and_called_tables_read_their_rows():
    env = {"kind": "env", "device": "NVIDIA H100 80GB HBM3", "date": "2030-01-01"}
    parts = {
        "inputs": 50.0,
        "exchange": 1000.0,
        "product": 600.0,
        "pointwise": 250.0,
        "stores": 60.0,
        "barrier": 1200.0,
    }
    rows = [
        env,
        {"kind": "parts", "direction": "forward", "exchange": "barrier", "programs": 96, "parts": parts,
         "step_ns": 3160.0, "ms": 2.56},
        {"kind": "parts", "direction": "backward", "exchange": "flags", "programs": 48,
         "parts": {**parts, "inputs": 9e10, "barrier": -9e10}, "step_ns": 5000.0, "ms": 4.0},
        {"kind": "time", "case": "split barrier", "training": False, "ms": 2.7, "wall_ms": 2.8},
        {"kind": "time", "case": "cuDNN nn.LSTM float16 fwd+bwd", "training": True, "ms": 6.6, "wall_ms": 7.0},
    ]  # fmt: skip
    table = split_report.parts_table(rows).splitlines()
    assert table[2].split()[:3] == ["forward", "barrier", "96"] and table[2].split()[-1] == "2500"  # 2.56 ms / 1024
    assert table[3].split()[3:9] == ["-"] * 6 and "backward flags" in table[-1]  # a stamp it did not write
    assert split_report.exchange_row(rows, "barrier")["ms"] == 2.7 and split_report.exchange_row(rows, "flags") is None
    assert split_report.exchange_row(rows, "cuDNN float16", training=True)["wall_ms"] == 7.0
    assert "cuDNN float16" in split_report.exchange_table(rows)
    called = [
        env,
        {"kind": "called", "problem": "tiny", "mode": "loop", "ms": 0.03, "wall_ms": 0.6, "host_ms": 0.55},
        {"kind": "called", "problem": "tiny", "mode": "graph", "ms": 0.02, "wall_ms": 0.02},
        {"kind": "breakdown", "problem": "tiny", "step_wall_ms": 0.6, "pieces_ms": {"a": 0.2, "b": 0.34},
         "pieces_sum_ms": 0.54, "kernels_device_ms": 0.02, "kernels_per_step": 6, "one_op_ms": 0.01},
    ]  # fmt: skip
    text = split_report.called_table(called)
    assert "30.00x" in text and "90% of the step" in text and "6 per step" in text
    assert "   0.550  30.00x" in text and "host ms" in text  # the host's time beside the clocks; '-' where none
    with pytest.raises(ValueError, match="record='called'"):
        split_report.called_table(rows)
    with pytest.raises(ValueError, match="record='steps'"):
        split_report.parts_table(called)


def test_the_stored_steps_and_called_records_read():
    steps = split_report.load_split("h100", record="steps")
    assert "forward   barrier" in split_report.parts_table(steps)
    assert split_report.exchange_row(steps, "barrier")["ms"] > 0
    assert "tiny" in split_report.called_table(split_report.load_split("h100", record="called"))


def test_shared_memory_budget_of_the_split_forward(tmp_path):
    """The compiled step's shared-memory bytes (all warps) against the stamped product, for the tilings both compiled
    and timed: every warp reads all of h, so the ldmatrix bytes grow with the warps."""
    rows = split_report.smem_rows(split_report.load_sass(), split_report.load_split("h100", record="hinted"))
    by = {(r["exchange"], r["warps"]): r for r in rows}
    assert by["hinted", 4]["ldsm_bytes"] > by["barrier", 2]["ldsm_bytes"]
    assert all(0 < r["ldsm_ns"] <= r["shared_ns"] for r in rows)
    assert "ldmatrix KB" in split_report.smem_table(rows)
    with pytest.raises(FileNotFoundError, match="sass05_split.py"):
        split_report.load_sass(root=tmp_path)


def test_loop_over_graph_reads_every_called_run_in_run_order(tmp_path):
    """One row per stored run with both wall clocks, ordered as bench.newest orders runs (the untagged first run of a
    day before its tagged ones), the ratio computed from the two clocks; a run without a graph row is left out."""
    folder = tmp_path / "07_rnn_split" / "split"
    folder.mkdir(parents=True)

    def write(name, loop, graph=None):
        rows = [{"kind": "called", "problem": "main", "mode": "loop", "ms": 1.5, "wall_ms": loop, "host_ms": 1.2}]
        rows += [{"kind": "called", "problem": "tiny", "mode": "graph", "ms": 0.02, "wall_ms": 0.02}]
        if graph is not None:
            rows.append({"kind": "called", "problem": "main", "mode": "graph", "ms": 1.4, "wall_ms": graph})
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("nvidia-h100-80gb-hbm3-2030-01-02-b-called.jsonl", 1.7, 1.6)
    write("nvidia-h100-80gb-hbm3-2030-01-02-called.jsonl", 2.0, 1.6)
    write("nvidia-h100-80gb-hbm3-2030-01-01-c-called.jsonl", 1.6)  # no graph: left out
    write("nvidia-h200-2030-01-03-called.jsonl", 1.0, 1.0)  # another GPU
    runs = split_report.loop_over_graph("h100", root=tmp_path)
    assert [r["file"][22:] for r in runs] == ["2030-01-02-called.jsonl", "2030-01-02-b-called.jsonl"]
    assert runs[0]["ratio"] == pytest.approx(1.25) and runs[1]["ratio"] == pytest.approx(1.7 / 1.6)
    assert (runs[1]["loop_device"], runs[1]["loop_host"]) == (1.5, 1.2)
    assert split_report.loop_over_graph("a100", root=tmp_path) == []
    stored = split_report.loop_over_graph("h100")
    assert stored and all(r["ratio"] == r["loop"] / r["graph"] for r in stored)
