"""Lesson 6's symmetric search (gpulab.tasks.search, .spread): the pick reads validation only, the spread table's
median and range, the CPU-sized run end to end, and its registration as `bench 08 search`."""

import math

import pytest

from gpulab import bench, lessons
from gpulab.tasks import search, spread

DEVICE = dict(lesson="08", device="NVIDIA H100 80GB HBM3", date="2030-01-01", mode="cuda", ms=math.nan)


def _search_row(task, model, lr, warmup, val_accuracy, val_loss=0.1):
    params = dict(kind="search", task=task, model=model, lr=lr, warmup=warmup, steps=100, seed=0, train_length=40,
                  val_accuracy=val_accuracy, val_loss=val_loss, parameters=10)  # fmt: skip
    return bench.Result(case=f"{task} {model} lr {lr:g} warmup {warmup}", params=params, **DEVICE)


def _accuracy_row(task, model, lr, seed, length, accuracy):
    params = dict(kind="accuracy", picked_by="val_accuracy", task=task, model=model, lr=lr, warmup=0, steps=100,
                  seed=seed, train_length=40, test_length=length, accuracy=accuracy, parameters=10)  # fmt: skip
    return bench.Result(case=f"{task} {model}", params=params, **DEVICE)


def test_the_pick_reads_validation_at_the_training_length_only():
    grid = [
        _search_row("parity", "Transformer", 1e-3, 0, 0.90),
        _search_row("parity", "Transformer", 3e-3, 0, 0.95),  # best validation: the pick
        _search_row("parity", "Transformer", 1e-2, 0, 0.60),
    ]
    # a planted record at another rate with better accuracy at the longer lengths (and at 40 on the test strings):
    # it is a test result, not validation, and must not move the pick
    planted = [_accuracy_row("parity", "Transformer", 1e-2, 0, n, 1.0) for n in (40, 80, 160, 640)]
    planted.append(_search_row("parity", "Transformer", 1e-2, 0, float("nan")))  # a failed validation never wins
    for records in (grid, grid + planted, planted + grid):
        (chosen,) = spread.pick(records).values()
        assert chosen.params["lr"] == 3e-3
    # a long-length accuracy written into a search row is not validation either
    grid[2].params["accuracy"] = 1.0
    assert spread.pick(grid)["parity", "Transformer"].params["lr"] == 3e-3


def test_the_pick_breaks_ties_by_validation_loss_and_keeps_models_and_tasks_apart():
    rows = [
        _search_row("modsum5", "LSTM", 1e-3, 0, 1.0, val_loss=0.02),
        _search_row("modsum5", "LSTM", 1e-2, 0, 1.0, val_loss=0.001),  # same accuracy, lower loss
        _search_row("modsum5", "Transformer", 1e-3, 150, 0.4),
        _search_row("parity", "LSTM", 3e-4, 0, 0.7),
    ]
    chosen = spread.pick(rows)
    assert {k: (r.params["lr"], r.params["warmup"]) for k, r in chosen.items()} == {
        ("modsum5", "LSTM"): (1e-2, 0),
        ("modsum5", "Transformer"): (1e-3, 150),
        ("parity", "LSTM"): (3e-4, 0),
    }


def test_the_spread_table_gives_median_and_range_over_seeds():
    recs = [_accuracy_row("parity", "Transformer", 1e-3, s, 40, a) for s, a in ((1, 0.5), (2, 0.9), (3, 0.6))]
    recs += [_accuracy_row("parity", "Transformer", 1e-3, s, 80, 0.5) for s in (1, 2, 3)]
    recs += [_accuracy_row("parity", "LSTM", 1e-2, s, n, 1.0) for s in (1, 2, 3) for n in (40, 80)]
    sp = spread.spread(recs)
    assert sp["parity", "Transformer"][40] == (0.6, 0.5, 0.9, 3)
    assert sp["parity", "Transformer"][80] == (0.5, 0.5, 0.5, 3)
    lines = spread.spread_table(recs).splitlines()
    row = next(line for line in lines if line.startswith("parity Transformer"))
    assert "60.0 (50.0-90.0)" in row and row.rstrip().endswith("50.0")  # seeds agree at 80: one number
    lstm = next(line for line in lines if line.startswith("parity LSTM"))
    assert lstm.split()[-2:] == ["100.0", "100.0"] and "3)" in lstm  # three seeds named in the label


def test_learning_rates_print_as_powers_of_ten_not_as_rounding_digits():
    from gpulab.course import prose

    texts = [spread.lr_text(lr) for lr in (3e-4, 1e-3, 2.5e-5, 1e-2)]
    assert texts == ["3·10⁻⁴", "10⁻³", "2.5·10⁻⁵", "10⁻²"]
    assert not any(prose.ROUNDING_DIGITS.search(t) for t in texts)


def test_the_cpu_sized_search_end_to_end(tmp_path):
    cfg = search.SEARCH["tiny"]
    results, fig = search.bench_search(size="tiny")
    errors = [f"{r.case}: {r.params['error']}" for r in results if "error" in r.params]
    assert not errors, errors
    grid = spread.search_records(results)
    assert len(grid) == len(cfg["tasks"]) * 2 * len(cfg["lrs"]) * len(cfg["warmups"])
    assert all(r.params["seed"] == cfg["search_seed"] and 0 <= r.params["val_accuracy"] <= 1 for r in grid)
    assert all(r.params["grid_lr"] == list(cfg["lrs"]) and r.params["steps"] == cfg["steps"] for r in grid)
    picked = [r for r in grid if r.params["picked"]]
    assert len(picked) == len(cfg["tasks"]) * 2
    assert {id(r) for r in picked} == {id(r) for r in spread.pick(results).values()}
    acc = [r for r in results if r.params.get("kind") == "accuracy"]
    assert len(acc) == len(cfg["tasks"]) * 2 * len(cfg["seeds"]) * len(cfg["test_lengths"])
    for r in acc:  # every seed trained at its (task, model)'s pick
        p = next(x for x in picked if (x.params["task"], x.params["model"]) == (r.params["task"], r.params["model"]))
        assert (r.params["lr"], r.params["warmup"]) == (p.params["lr"], p.params["warmup"])
        assert r.params["val_seed"] == search.val_seed(r.params["seed"]) and r.params["seed"] in cfg["seeds"]
    assert {r.params["phase"] for r in results if r.params.get("kind") == "utilization"} == {"search", "seeds"}
    # stored and read back where the lesson reads it
    folder = tmp_path / "08_state_tracking" / "search"
    bench.save(results, "08", path=folder / "nvidia-h100-80gb-hbm3-2030-01-01-search.jsonl")
    stored = spread.stored_search("h100", root=tmp_path)
    assert spread.spread_table(stored) == spread.spread_table(results)
    assert spread.search_table(stored) == spread.search_table(results)
    assert spread.stored_search("a100", root=tmp_path) == []
    assert len(fig.axes) == len(cfg["tasks"])


def test_validation_strings_are_apart_from_training_and_test_strings():
    seeds = search.SEARCH["full"]["seeds"] + (search.SEARCH["full"]["search_seed"],)
    tests = {s + 1000 + n for s in seeds for n in search.SEARCH["full"]["test_lengths"]}
    vals = {search.val_seed(s) for s in seeds}
    assert not vals & (tests | set(seeds))


def test_lesson_06_registers_the_search_part():
    assert lessons.benchmark("08", "search") is search.bench_search
    assert lessons.part_folder("08", "search") == "search"


@pytest.mark.gpu
def test_gpu_concurrent_search_runs_every_training_in_worker_processes():
    """On a GPU the tiny search in two worker processes (spawned, one CUDA context each, fused LSTM and
    FlashAttention) runs every training without error and records the picks and seeds as in one process."""
    cfg = search.SEARCH["tiny"]
    results = search.search("tiny", workers=2)
    assert not [r.params["error"] for r in results if "error" in r.params]
    grid = spread.search_records(results)
    assert len(grid) == len(cfg["tasks"]) * 2 * len(cfg["lrs"]) * len(cfg["warmups"])
    assert all(r.params["backend"] == "fused" for r in grid if r.params["model"] == "LSTM")
    assert all(r.params["attention"] == "flash" for r in grid if r.params["model"] == "Transformer")
    assert sum(r.params["picked"] for r in grid) == len(cfg["tasks"]) * 2
    acc = [r for r in results if r.params.get("kind") == "accuracy"]
    assert len(acc) == len(cfg["tasks"]) * 2 * len(cfg["seeds"]) * len(cfg["test_lengths"])
    assert {r.params["workers"] for r in results if r.params.get("kind") == "utilization"} == {2}
