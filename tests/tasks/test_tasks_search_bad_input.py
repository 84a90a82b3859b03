"""Lesson 6's search (gpulab.tasks.search, .spread) refuses bad input with a TypeError or ValueError naming the
argument. One table: (id, call, expected exception, a word the message must contain)."""

import pytest
import torch

from gpulab import tasks
from gpulab.tasks import search, spread

CASES = [
    ("val-seed-str", lambda m: search.val_seed("1"), TypeError, "seed"),
    ("validate-model-str", lambda m: search.validate("model", "parity", 4, 8, 0), TypeError, "model"),
    ("validate-length-0", lambda m: search.validate(m, "parity", 0, 8, 0), ValueError, "length"),
    ("validate-samples-float", lambda m: search.validate(m, "parity", 4, 8.0, 0), TypeError, "samples"),
    ("train-one-list", lambda m: search.train_one(["parity"]), TypeError, "spec"),
    ("train-one-missing", lambda m: search.train_one({"task": "parity"}), ValueError, "missing the keys"),
    ("run-all-str", lambda m: search.run_all("parity"), TypeError, "specs"),
    ("run-all-workers-0", lambda m: search.run_all([], workers=0), ValueError, "workers"),
    ("run-all-bad-spec", lambda m: search.run_all([{"task": "parity"}]), ValueError, "spec"),
    ("search-size", lambda m: search.search(size="huge"), ValueError, "size"),
    ("search-size-dict", lambda m: search.search(size={"tasks": ("parity",)}), ValueError, "missing the keys"),
    ("bench-search-size", lambda m: search.bench_search(size=3), ValueError, "size"),
    ("lr-text-0", lambda m: spread.lr_text(0.0), ValueError, "lr"),
    ("lr-text-str", lambda m: spread.lr_text("1e-3"), TypeError, "lr"),
    ("search-records-str", lambda m: spread.search_records("records"), TypeError, "results"),
    ("pick-dict", lambda m: spread.pick({"kind": "search"}), TypeError, "results"),
    ("spread-one-record", lambda m: spread.spread(object()), TypeError, "results"),
    ("search-table-int", lambda m: spread.search_table(3), TypeError, "results"),
    ("spread-table-str", lambda m: spread.spread_table("x"), TypeError, "results"),
    ("plot-spread-str", lambda m: spread.plot_spread("x"), TypeError, "results"),
    ("figure-str", lambda m: spread.figure("x"), TypeError, "results"),
    ("stored-search-int", lambda m: spread.stored_search(100), TypeError, "gpu"),
]


@pytest.mark.parametrize("call, exc, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(call, exc, word):
    torch.manual_seed(0)
    model = tasks.LSTMModel(2, 2, d_model=8, backend="vanilla")
    with pytest.raises(exc, match=word):
        call(model)
