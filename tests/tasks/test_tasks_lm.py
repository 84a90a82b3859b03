"""Lesson 6's language modelling (gpulab.tasks.corpus, .lm, .lm_bench, .lm_results): the corpus's checksums and
their failure messages, the split by file, the memory-mapped loader, the parameter match, a tiny CPU training whose
loss falls, and the two benchmark parts end to end at a micro size."""

import dataclasses
import hashlib
import json
import math

import numpy as np
import pytest
import torch

from gpulab import bench, lessons
from gpulab.tasks import corpus, lm, lm_bench, lm_results
from gpulab.tasks.models import count_parameters


def _mini_corpus(tmp_path, train=b"abcdefghijklm" * 40, val=b"nopqrstuvwxyz" * 10):
    """A prepared-corpus-shaped pair of files (.bin, .json) whose train bytes are a..m and validation bytes n..z."""
    path = tmp_path / "mini.bin"
    path.write_bytes(train + val)
    sha = hashlib.sha256(train + val).hexdigest()
    path.with_suffix(".json").write_text(json.dumps({"train_bytes": len(train), "sha256": sha}))
    return path


def test_a_corpus_with_other_bytes_is_refused_naming_both_checksums(tmp_path):
    path = _mini_corpus(tmp_path)
    with pytest.raises(corpus.CorpusError) as e:
        corpus.load(path)
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    assert got in str(e.value) and corpus.TEXT_SHA256 in str(e.value) and "prepare" in str(e.value)
    fake = tmp_path / "python3.11-doc_fake_all.deb"
    fake.write_bytes(b"!<arch>\nnot the package")
    with pytest.raises(corpus.CorpusError, match=corpus.DEB_SHA256):
        corpus.prepare(tmp_path / "out.bin", deb=fake)
    assert not (tmp_path / "out.bin").exists()
    with pytest.raises(corpus.CorpusError, match="no prepared corpus"):
        corpus.load(tmp_path / "absent.bin")


def test_the_cpu_slice_is_the_pinned_text():
    s = corpus.cpu_slice()
    assert hashlib.sha256(np.asarray(s.data).tobytes()).hexdigest() == corpus.SLICE_SHA256
    assert s.train_bytes == corpus.SLICE_TRAIN_BYTES and s.validation_bytes == corpus.SLICE_VAL_BYTES
    assert bytes(s.split("train")[:21]) == b"=====================" and s.data.max() < 128  # the docs' rst text
    committed = corpus.cpu_slice(path="/nonexistent/corpus.bin")  # the committed copy, memory-mapped
    assert isinstance(committed.data, np.memmap) and np.array_equal(committed.data, s.data)


def test_the_split_is_by_file_from_a_hash_of_its_path_alone():
    paths = [f"library/module_{i}.rst.txt" for i in range(4000)]
    val = [p for p in paths if corpus.is_validation(p)]
    assert 0.03 < len(val) / len(paths) < 0.07  # about VAL_FRACTION = 5% (13 of 256 first bytes)
    assert all(corpus.is_validation(p) == (hashlib.sha256(p.encode()).digest()[0] < 12.8) for p in paths[:200])
    assert not any(corpus.is_validation(p, 0.0) for p in paths) and all(corpus.is_validation(p, 1.0) for p in paths)
    with pytest.raises(TypeError, match="path must be"):
        corpus.is_validation("")
    with pytest.raises(ValueError, match="fraction=2.0"):
        corpus.is_validation("a", 2.0)


def test_the_prepared_manifest_follows_the_split():
    path = corpus.default_path()
    if not path.with_suffix(".json").exists():
        pytest.skip("no prepared corpus here (python -m gpulab.tasks.corpus prepare)")
    meta = json.loads(path.with_suffix(".json").read_text())
    files, offset = meta["files"], 0
    for f in files:
        assert f["split"] == ("validation" if corpus.is_validation(f["path"]) else "train")
        assert f["offset"] == offset
        offset += f["bytes"]
    assert offset == meta["bytes"] == path.stat().st_size
    first_val = next(i for i, f in enumerate(files) if f["split"] == "validation")
    assert all(f["split"] == "validation" for f in files[first_val:])  # train files first, then validation
    assert meta["train_bytes"] == files[first_val]["offset"]


def test_the_loader_maps_the_file_and_copies_only_its_windows(tmp_path):
    c = corpus.load(_mini_corpus(tmp_path), verify=False)
    assert isinstance(c.data, np.memmap) and c.data.dtype == np.uint8
    assert np.shares_memory(c.split("train"), c.data) and np.shares_memory(c.split("validation"), c.data)
    text = c.data.tobytes()
    x, y = c.batch(16, 12, torch.Generator().manual_seed(3), "train", device="cpu")
    assert x.shape == y.shape == (16, 12) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one byte
    for row_x, row_y in zip(x, y):
        window = bytes(row_x.tolist()) + bytes(row_y[-1:].tolist())
        assert window in text and set(window) <= set(b"abcdefghijklm")  # in the train split only
    vx, _ = c.batch(8, 12, torch.Generator().manual_seed(3), "validation", device="cpu")
    assert set(vx.flatten().tolist()) <= set(b"nopqrstuvwxyz")
    w1, w2 = c.windows(5, 12, device="cpu"), c.windows(5, 12, device="cpu")
    assert torch.equal(w1[0], w2[0]) and set(w1[0].flatten().tolist()) <= set(b"nopqrstuvwxyz")
    with pytest.raises(ValueError, match="length=500 does not fit the validation split"):
        c.batch(2, 500, torch.Generator(), "validation")
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        c.batch(2, 4, 0)


def test_the_three_models_have_parameters_within_5_percent_at_the_gpu_size():
    cfg = lm.LM_SIZES["full"]
    counts = {}
    for model in lm.MODELS:
        m, info = lm.build(model, "full", device="cpu")
        counts[model] = count_parameters(m)
        assert counts[model] == info["parameters"]
        assert counts[model] == lm.model_parameters(model, info["d_model"], cfg["num_layers"], cfg["heads"])
        assert len(m.blocks) == cfg["num_layers"]  # the same depth
        del m
    assert lm.lstm_width(cfg["d_model"], cfg["num_layers"], cfg["heads"], cfg["width_multiple"]) < cfg["d_model"]
    for model, n in counts.items():
        assert abs(n / counts["Transformer"] - 1) < 0.05, (model, n, counts)
    # the unnarrowed one-head LSTM would be a third larger: the narrowing is what makes the match
    assert lm.model_parameters("LSTM 1 head", 768, 2) / counts["Transformer"] > 1.25


@pytest.mark.parametrize("model", ["LSTM 1 head", "Transformer"])
def test_a_tiny_cpu_training_lowers_the_validation_bits_per_byte(model):
    """The CPU path: the LSTM on its vanilla backend, attention on its PyTorch reference (``naive``)."""
    data = corpus.cpu_slice()
    m, info = lm.build(model, "tiny", seed=0, device="cpu")
    assert info.get("backend", "vanilla") == "vanilla" and info.get("attention", "naive") == "naive"
    before = lm.bits_per_byte(m, data, 8, 32, 4)
    out = lm.train_lm(m, data, tokens=30 * 128, batch_size=4, length=32, lr=1e-2, warmup=2, seed=0,
                      eval_every=15 * 128, val_windows=8)  # fmt: skip
    assert [c["tokens"] for c in out["curve"]] == [15 * 128, 30 * 128] and out["steps"] == 30
    assert all(c["seconds"] > 0 for c in out["curve"]) and out["curve"][1]["seconds"] > out["curve"][0]["seconds"]
    assert 7.0 < before < 9.0  # about uniform over 256 bytes at initialisation
    assert out["val_bpb"] < before - 1.5, (before, out["curve"])
    a = lm.generate(m, count=16, seed=5, context=32)
    assert len(a) == 16 and a == lm.generate(m, count=16, seed=5, context=32)


def test_the_two_parts_run_end_to_end_at_a_micro_size(tmp_path, monkeypatch):
    monkeypatch.setenv("GPULAB_LM_JOURNAL", str(tmp_path / "journal.jsonl"))
    cfg = {**lm_bench.LM_RUNS["tiny"], "lrs": (3e-3, 3e-2), "warmups": (0, 2), "search_tokens": 256,
           "final_tokens": 512, "search_eval_every": 256, "eval_every": 256, "seeds": (1,), "generate": 8}  # fmt: skip
    search = lm_bench.lm_search(cfg, verbose=False)
    assert len(search) == len(lm.MODELS) * 4
    chosen = lm_bench.picks(search)
    for model in lm.MODELS:  # the pick is the lowest validation bits per byte of the model's grid
        rows = [r for r in search if r.params["model"] == model]
        best = min(rows, key=lambda r: r.params["val_bpb"])
        assert chosen[model] == (best.params["lr"], best.params["warmup"])
    seconds, how = lm_bench.estimate(cfg, "final", search)
    assert seconds > 0 and "as measured by the search" in how
    final = lm_bench.lm_final(cfg, search=search, verbose=False)
    assert [r.params["model"] for r in final] == list(lm.MODELS)
    for r in final:
        p = r.params
        assert p["kind"] == "lm" and p["corpus_sha256"] == corpus.SLICE_SHA256 and r.device and r.torch and r.date
        assert [c["tokens"] for c in p["curve"]] == [256, 512] and math.isfinite(p["val_bpb"])
        assert p["tokens_per_s"] > 0 and r.wall_ms > 0 and len(bytes.fromhex(p["generated_hex"])) == 8
    journal = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert len(journal) == len(search) + len(final)
    # the journal keeps the search's records before the picks are marked: the same picks from it
    assert lm_bench.picks(bench.load("08", path=tmp_path / "journal.jsonl")) == chosen
    assert "LSTM 12 heads" in lm_results.final_table(final) and "*" in lm_results.search_table(search)
    assert set(lm_results.at_equal(final, tokens=384)) == set(lm.MODELS)
    assert lm_results.at_equal(final, tokens=10_000) == {}  # beyond every curve
    assert lm_results.throughput_ratios(final)["Transformer"] == 1.0
    fig = lm_results.figure(final)
    assert len(fig.axes) == 2 and len(fig.axes[0].lines) == len(lm.MODELS)
    with pytest.raises(ValueError, match="no pick for"):
        lm_bench.lm_final(cfg, search=[], verbose=False)


def test_the_parts_are_registered_and_read_back(tmp_path):
    assert lessons.benchmark("08", "lm") is lm_bench.bench_lm
    assert lessons.benchmark("08", "lm-search") is lm_bench.bench_lm_search
    assert lessons.part_folder("08", "lm") == lessons.part_folder("08", "lm-search") == "lm"
    assert lm_results.stored_lm("h200", root=tmp_path) == []
    r = bench.record(lesson="08", case="Transformer seed 1", kind="lm", model="Transformer")
    r.device = "NVIDIA H200"
    folder = tmp_path / "08_state_tracking" / "lm"
    bench.save([r], "08", path=folder / "nvidia-h200-2030-01-01-lm.jsonl")
    bench.save([r], "08", path=folder / "nvidia-h200-2030-01-02-lm-search.jsonl")
    (got,) = lm_results.stored_lm("h200", root=tmp_path)
    assert got.case == "Transformer seed 1"
    with pytest.raises(ValueError, match="runs='huge' is not known"):
        lm_bench.runs("huge")
    with pytest.raises(ValueError, match="model='GRU'"):
        lm.build("GRU")


@pytest.mark.gpu
def test_gpu_the_full_size_models_train_on_the_course_kernels():
    """On a GPU: each model at the H200 run's size, on the fused LSTM kernels and FlashAttention, a few steps."""
    path = corpus.default_path()
    data = corpus.load() if path.exists() else corpus.cpu_slice()
    cfg = lm.LM_SIZES["full"]
    for model in lm.MODELS:
        m, info = lm.build(model, "full")
        assert info.get("backend", "fused") == "fused" and info.get("attention", "flash") == "flash", info
        step = cfg["batch_size"] * cfg["length"]
        out = lm.train_lm(m, data, tokens=4 * step, batch_size=cfg["batch_size"], length=cfg["length"], lr=1e-3,
                          warmup=2, seed=0, eval_every=2 * step, val_windows=8)  # fmt: skip
        assert out["steps"] == 4 and len(out["curve"]) == 2 and math.isfinite(out["val_bpb"]), (model, out)
        assert out["device_seconds"] > 0 and out["tokens_per_s"] > 0
        assert len(lm.generate(m, count=8)) == 8
        del m


def test_the_gpu_run_is_sized_to_fit_two_commands_of_under_9_minutes():
    """From lesson 6's stored H100 throughput (d 768, bf16), scaled to these models: each phase under 9 minutes."""
    full = lm_bench.runs("full")
    assert full["final_tokens"] >= 100_000_000 and len(full["seeds"]) >= 3
    assert len(full["lrs"]) >= 4 and len(full["warmups"]) >= 2
    for phase in ("search", "final"):
        seconds, how = lm_bench.estimate(full, phase)
        assert 60 < seconds < 9 * 60, (phase, seconds, how)


def test_findings_state_the_order_the_records_give():
    """The lesson's verdict sentences follow the records: the models in the order of their bits per byte read off
    the curves (per byte at the smallest budget, per second at the shortest run's time), the throughput ratios
    beside the article's; nothing without records. Also on a copy whose numbers are changed: the sentences follow."""
    final = lm_results.stored_lm("h200")
    if not final:
        pytest.skip("no H200 lm records in benchmarks/08_state_tracking/lm/")
    for records in (final, _flipped(final)):
        text = lm_results.findings(records).splitlines()
        budget = min(r.params["tokens"] for r in records)
        seconds = min(r.params["curve"][-1]["seconds"] for r in records)
        for line, values in ((text[0], lm_results.at_equal(records, tokens=budget)),
                             (text[1], lm_results.at_equal(records, seconds=seconds))):  # fmt: skip
            order = [m for m, _ in sorted(values.items(), key=lambda kv: kv[1])]
            assert [line.index(f"{m} (") for m in order] == sorted(line.index(f"{m} (") for m in order), line
        ratios = lm_results.throughput_ratios(records)
        assert f"LSTM 1 head {ratios['LSTM 1 head']:.2f}x" in text[2]
    assert lm_results.findings([]) == ""


def _flipped(records):
    """The records with every validation loss replaced by 3 minus it: the order per byte and per second reverses."""
    out = []
    for r in records:
        params = {**r.params, "curve": [{**c, "val_bpb": 3 - c["val_bpb"]} for c in r.params["curve"]]}
        out.append(dataclasses.replace(r, params=params))
    return out
