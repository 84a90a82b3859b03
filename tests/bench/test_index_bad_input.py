"""The record index's readers (gpulab.bench.index, re-exported as gpulab.bench.current) refuse bad input with an
error naming the argument."""

import pytest

from gpulab import bench
from gpulab.bench import index

BAD = [
    ("current-part-empty", lambda: index.current("00", ""), TypeError, "part"),
    ("current-gpu-int", lambda: index.current("04", "main", 7), TypeError, "gpu must be a GPU name"),
    ("current-lesson-int", lambda: index.current(4), TypeError, "lesson"),
    ("current_file-gpu-int", lambda: index.current_file("04", "main", 7), TypeError, "gpu must be a GPU name"),
    ("records-current-gpu-int", lambda: bench.current("00", "main", 3.5), TypeError, "gpu"),
    ("banner-lesson-int", lambda: index.banner(4), TypeError, "lesson"),
    ("record_set-part-empty", lambda: index.record_set("00", "", []), TypeError, "part"),
    ("part_key-lesson-int", lambda: index.part_key(4, None), TypeError, "lesson"),
]


@pytest.mark.parametrize("call, error, word", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_index_readers_refuse_bad_input(call, error, word):
    with pytest.raises(error, match=word):
        call()
