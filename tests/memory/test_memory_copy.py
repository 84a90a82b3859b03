"""Lesson 0's copy kernel (gpulab.memory.copy) in Triton's interpreter: exact at odd sizes, nothing written past
the end, and its output from the one poison policy. (Bad input: test_memory_bad_input.py.)"""

import pytest
import torch

from gpulab import check, memory

# ----------------------------------------------------------------------------------------------------------------
# copy


@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_copy(n, dtype):
    src = check.random_tensor(n, dtype=dtype)
    out = check.poisoned(n, dtype=dtype)
    got = memory.copy(src, out)
    assert got is out
    check.assert_close(out, src, rtol=0.0, name="copy", context=f"n={n}, {dtype}")  # a copy is exact


@pytest.mark.parametrize(("n", "block"), [(1, 16), (17, 16), (1000, 64), (4097, 1024)])
def test_copy_writes_nothing_past_the_end(n, block):
    src = check.random_tensor(n)
    guard = check.poisoned(n + block)
    out = guard[:n]
    memory.copy(src, out, block=block)
    check.assert_close(out, src, rtol=0.0)
    assert torch.isnan(guard[n:]).all()


def test_copy_allocates_out_and_keeps_shape():
    src = check.random_tensor(7, 13, dtype=torch.float16)
    out = memory.copy(src)
    assert out.shape == (7, 13) and out.dtype == torch.float16 and out.data_ptr() != src.data_ptr()
    check.assert_close(out, memory.copy_reference(src), rtol=0.0)


def test_copy_zero_size():
    src = torch.empty(0)
    out = memory.copy(src)
    assert out.shape == (0,)
    given = torch.empty(0)
    assert memory.copy(src, given) is given


def test_copy_allocates_through_the_poison_policy(monkeypatch):
    made = []
    real = check.new_output
    monkeypatch.setattr(check, "new_output", lambda *shape, **kw: made.append(shape) or real(*shape, **kw))
    src = check.random_tensor(3, 5)
    check.assert_close(memory.copy(src), src, rtol=0.0)
    x = memory.sweep_data(40)
    memory.working_set_sweep(x, 40, 2, 3, 16)  # 3 chunks, 2 programs
    assert made == [(torch.Size([3, 5]),), (2,)]
