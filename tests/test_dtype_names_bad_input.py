"""gpulab.dtypes' names: the one map between dtypes and the names records store (``name``) and tables print
(``short``), both ways, and the errors for what has no name."""

import pytest
import torch

from gpulab import dtypes

LABELS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}


@pytest.mark.parametrize("dtype", list(LABELS), ids=str)
def test_names_and_labels_round_trip(dtype):
    long = dtypes.name(dtype)
    assert long == str(dtype).removeprefix("torch.")
    assert dtypes.as_dtype(long) is dtype and dtypes.as_dtype(dtypes.short(dtype)) is dtype
    assert dtypes.short(dtype) == dtypes.short(long) == LABELS[dtype] and dtypes.name(LABELS[dtype]) == long


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: dtypes.short("int4"), ValueError, "dtype='int4'"),
        (lambda: dtypes.short(torch.int8), ValueError, "no short label"),
        (lambda: dtypes.short(None), TypeError, "got NoneType None"),
        (lambda: dtypes.short("float8"), ValueError, "dtype='float8'"),
        (lambda: dtypes.name("nope"), ValueError, "dtype='nope'"),
        (lambda: dtypes.name(3.0), ValueError, "dtype=3.0"),
    ],
    ids=["short-unknown-name", "short-unlabelled", "short-none", "short-float8", "name-unknown", "name-float"],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=words):
        call()
