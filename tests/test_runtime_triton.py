"""The Triton versions gpulab supports on CPU (3.6, the H100's; 3.7; 3.9, the newest) and the interpreter traps
gpulab.runtime handles for them: here, whichever of them this environment has (`make test` runs two)."""

import pytest
import torch
import triton
import triton.language as tl

from gpulab import runtime


@pytest.mark.parametrize(
    ("version", "too_old"),
    [("3.5.1", True), ("3.2.0", True), ("2.3.1", True), ("3.6.0", False), ("3.7.1", False), ("3.9.0", False),
     ("3.10.0", False), ("3.6.0+git1234", False)],
)  # fmt: skip
def test_triton_older_than_3_6_is_refused_with_the_fix(version, too_old):
    problem = runtime._triton_too_old(version)
    assert (problem is not None) == too_old
    if too_old:
        assert version in problem and "triton==3.6.0" in problem and ">= 3.6" in problem


def test_this_triton_is_supported():
    assert runtime._triton_too_old(triton.__version__) is None


@triton.jit
def _masked_copy(x_ptr, y_ptr, n_rows, n_cols, flag, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    row_ok = (rows < n_rows)[:, None]
    mask = row_ok & (flag > 0)  # a scalar condition broadcast into the block: numpy int32 data in the interpreter
    mask = mask & (cols < n_cols)[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) + 1.0, mask=mask)


@pytest.mark.parametrize("flag", [1, 0])
def test_a_mask_from_a_broadcast_scalar_condition_loads_and_stores(flag):
    """Triton 3.9's interpreter raised "mask has unsupported dtype" here (runtime._bool_masks)."""
    x = torch.arange(15, dtype=torch.float32, device=runtime.device).reshape(3, 5)
    y = torch.full_like(x, float("nan"))
    _masked_copy[(1,)](x, y, 3, 5, flag, BLOCK=8)
    if flag:
        torch.testing.assert_close(y, x + 1)
    else:
        assert y.isnan().all()  # nothing loaded or stored
