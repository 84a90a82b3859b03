"""benchmarks/INDEX.json, the current record set: every entry exists, every lesson with records has an entry, no
entry and no reader is under benchmarks/history/, and the loaders read what the index names."""

import io
import json
import tokenize
from pathlib import Path

import pytest

from gpulab import bench, lessons
from gpulab.bench import index

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def test_every_entry_exists_and_is_current():
    found = index.entries(BENCH)
    assert found, "benchmarks/INDEX.json names no record"
    for lesson, part, gpu, path in found:
        assert path.is_file(), f"INDEX.json: {lesson} {part} {gpu} -> {path} does not exist"
        assert index.HISTORY not in path.relative_to(BENCH).parts, f"{path} is history, not current"


def test_every_lesson_with_records_has_entries_and_every_part_a_file():
    table = index.read_index(BENCH)
    for lesson in lessons.LESSONS:
        folder = BENCH / lesson.slug
        if any(folder.rglob("*.jsonl")):
            assert table.get(lesson.id), f"lesson {lesson.id} has records in {folder} but no INDEX.json entry"
    for lesson, by_part in table.items():
        for part, by_gpu in by_part.items():
            assert by_gpu and all(by_gpu.values()), f"INDEX.json: {lesson} {part} names no file"


def test_session_logs_are_history():
    logs = [p for p in BENCH.rglob("session-*.log") if index.HISTORY not in p.relative_to(BENCH).parts]
    assert not logs, f"session logs outside benchmarks/{index.HISTORY}/: {logs}"


def test_no_package_module_names_the_history_folder():
    named = []
    for path in sorted((ROOT / "gpulab").rglob("*.py")):
        toks = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
        for tok in toks:
            docstring = tok.string.lstrip("rbuf").startswith(('"""', "'''"))  # prose may name the folder
            if tok.type == tokenize.STRING and not docstring and "benchmarks/history" in tok.string:
                named.append(f"{path.relative_to(ROOT)}:{tok.start[0]}")
    assert not named, f"a reader opens benchmarks/history/: {named}"


def test_loaders_read_the_index(tmp_path):
    # a copy of lesson 0's folder with an older and a newer run: load() takes the indexed one, not the newest name
    src = index.current_file("00", "main", "h100", BENCH)
    folder = tmp_path / "00_memory_hierarchy"
    folder.mkdir()
    old, new = folder / "nvidia-h100-80gb-hbm3-2026-01-01.jsonl", folder / "nvidia-h100-80gb-hbm3-2026-12-31.jsonl"
    old.write_text(src.read_text())
    new.write_text("")
    (tmp_path / "INDEX.json").write_text(
        json.dumps(
            {
                "lessons": {
                    "00": {
                        "main": {
                            "nvidia-h100-80gb-hbm3": ["00_memory_hierarchy/nvidia-h100-80gb-hbm3-2026-01-01.jsonl"]
                        }
                    }
                }
            }
        )
    )
    assert bench.current("00", root=tmp_path) == old
    assert bench.load("00", gpu="h100", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="part 'nope'"):
        bench.current("00", "nope", root=tmp_path)


def test_an_entry_under_history_is_refused(tmp_path):
    (tmp_path / "INDEX.json").write_text(json.dumps({"lessons": {"00": {"main": {"x": ["history/00/a.jsonl"]}}}}))
    with pytest.raises(ValueError, match="history"):
        index.current("00", root=tmp_path, gpu=None)


def test_without_an_index_the_newest_run_is_current(tmp_path):
    folder = tmp_path / "00_memory_hierarchy"
    folder.mkdir()
    for day in ("01", "02"):
        (folder / f"nvidia-h100-80gb-hbm3-2026-01-{day}.jsonl").write_text("")
    assert bench.current("00", root=tmp_path).name.endswith("2026-01-02.jsonl")


@pytest.mark.parametrize("bad, kind", [(("00", ""), TypeError), (("00", "main", 3), TypeError), ((4,), TypeError)])
def test_bad_input_names_the_argument(bad, kind):
    with pytest.raises(kind, match="part|gpu|lesson"):
        index.current(*bad, root=BENCH)


def _result(device="NVIDIA H100 80GB HBM3", date="2026-01-02"):
    return bench.Result(lesson="00", case="copy", device=device, date=date, mode="cuda", ms=1.0, torch="2.0",
                        triton="3.6.0")  # fmt: skip


def test_saving_a_part_makes_it_the_current_record_and_returns_what_it_superseded(tmp_path):
    first = bench.save([_result(date="2026-01-02")], "00", root=tmp_path, part="main")
    assert index.read_index(tmp_path) == {
        "00": {"main": {"nvidia-h100-80gb-hbm3": [first.relative_to(tmp_path).as_posix()]}}
    }
    assert bench.current("00", root=tmp_path) == first
    second = bench.save([_result(date="2026-01-03")], "00", root=tmp_path, part="main")
    assert bench.current("00", root=tmp_path) == second and first.exists()
    # another GPU's run of the same part is a second entry; the H100's stays current
    a100 = bench.save([_result(device="NVIDIA A100-SXM4-80GB", date="2026-01-04")], "00", root=tmp_path, part="main")
    assert bench.current("00", gpu="h100", root=tmp_path) == second
    assert bench.current("00", gpu="a100", root=tmp_path) == a100
    superseded = index.record_set("00", "main", [first], tmp_path)
    assert superseded == [second] and bench.current("00", root=tmp_path) == first
    # without a part the index is left alone (a scratch run)
    bench.save([_result(date="2026-01-05")], "00", root=tmp_path)
    assert bench.current("00", root=tmp_path) == first
    assert (
        "Record (00 main): `00_memory_hierarchy/nvidia-h100-80gb-hbm3-2026-01-02.jsonl`: NVIDIA H100 80GB HBM3, torch "
        "2.0, Triton 3.6.0, 2026-01-02" == index.banner("00", "main", root=tmp_path)
    )


def test_record_set_refuses_files_it_cannot_index(tmp_path):
    outside = tmp_path / "elsewhere" / "nvidia-h100-80gb-hbm3-2026-01-01.jsonl"
    with pytest.raises(ValueError, match="not under the results folder"):
        index.record_set("00", "main", [outside], tmp_path / "benchmarks")
    with pytest.raises(ValueError, match="history"):
        index.record_set("00", "main", [tmp_path / "history" / "00" / "nvidia-h100-2026-01-01.jsonl"], tmp_path)
    with pytest.raises(ValueError, match="gpu slug"):
        index.record_set("00", "main", [tmp_path / "00_memory_hierarchy" / "run.jsonl"], tmp_path)
    two = [tmp_path / "nvidia-h100-2026-01-01.jsonl", tmp_path / "nvidia-a100-2026-01-01.jsonl"]
    with pytest.raises(ValueError, match="one GPU"):
        index.record_set("00", "main", two, tmp_path)
    with pytest.raises(TypeError, match="part"):
        index.record_set("00", "", two, tmp_path)
    with pytest.raises(ValueError, match="names no .jsonl record"):
        index.banner("00", "main", root=tmp_path)


@pytest.mark.parametrize(
    "lesson, part, key",
    [("04", None, "main"), ("05", "cs336", "hopper/cs336"), ("05", "v3-tune", "v3/tune"),
     ("07", "cross", "split/cross"), ("08", "lm-search", "lm-search"), ("05", "v3", "v3"), ("07", "split", "split")],
)  # fmt: skip
def test_a_cli_part_maps_to_its_index_entry(lesson, part, key):
    assert index.part_key(lesson, part, BENCH) == key


@pytest.mark.parametrize("folder", ["05_attention_hopper/v3", "07_rnn_split/v6"])
def test_every_record_of_a_reduced_folder_is_indexed(folder):
    # these folders hold the current set only: a superseded run belongs under benchmarks/history/<same path>
    named = {path for _, _, _, path in index.entries(BENCH)}
    stray = sorted(p.name for p in (BENCH / folder).iterdir() if p.is_file() and p not in named)
    assert not stray, f"benchmarks/{folder} holds files INDEX.json does not name (move them to history/): {stray}"
