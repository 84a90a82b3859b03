"""The interpreter's byte counter on kernels whose traffic is known exactly."""

import pytest
import torch

import gpulab  # noqa: F401
from gpulab import traffic

import triton  # isort: skip
import triton.language as tl  # isort: skip


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


@triton.jit
def _read_twice(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(src + offs, mask=m)
    b = tl.load(src + offs, mask=m)
    tl.store(dst + offs, a + b, mask=m)


@pytest.mark.parametrize("n, dtype", [(1, torch.float32), (17, torch.float32), (100, torch.float16)], ids=str)
def test_copy_moves_each_element_once(n, dtype):
    src, dst = torch.randn(n).to(dtype), torch.full((n,), float("nan"), dtype=dtype)
    with traffic.count(src=src, dst=dst) as c:
        _copy[(triton.cdiv(n, 16),)](src, dst, n, BLOCK=16)
    size = n * src.element_size()
    assert (c.loaded, c.stored) == (size, size)  # masked lanes of the last block are not counted
    assert c.by_tensor["src"].loaded == size and c.by_tensor["src"].stored == 0
    assert c.by_tensor["dst"].stored == size and c.by_tensor["dst"].loaded == 0
    assert len(c.per_program) == triton.cdiv(n, 16)
    assert torch.equal(dst, src)


def test_re_reads_count_twice_but_unique_once():
    n = 40
    src, dst = torch.randn(n), torch.empty(n)
    with traffic.count(src=src) as c:
        _read_twice[(3,)](src, dst, n, BLOCK=16)
    assert c.loaded == 2 * 4 * n and c.unique_loaded == 4 * n


def test_touched_shows_each_programs_tile():
    n = 40
    src, dst = torch.randn(n), torch.empty(n)
    with traffic.count(src=src) as c:
        _copy[(3,)](src, dst, n, BLOCK=16)
    tile = c.touched("src", program=(1, 0, 0))
    assert tile.sum() == 16 and tile[16:32].all()
    assert c.touched("src").all()
    with pytest.raises(ValueError, match="name"):
        c.touched("nope")


def test_counter_is_removed_after_the_block():
    src, dst = torch.randn(8), torch.empty(8)
    with traffic.count() as c:
        _copy[(1,)](src, dst, 8, BLOCK=16)
    _copy[(1,)](src, dst, 8, BLOCK=16)
    assert c.loaded == 32 and c.accesses == 2


def test_a_triton_without_the_hooks_fails_loudly(monkeypatch):
    """A Triton whose interpreter no longer has a wrapped method is refused, naming the version and the method."""
    import triton as triton_module
    from triton.runtime import interpreter

    monkeypatch.setattr(triton_module, "__version__", "9.9.0")
    monkeypatch.delattr(type(interpreter.interpreter_builder), "create_masked_store")
    with pytest.raises(RuntimeError, match="Triton 9.9.0 lacks .*create_masked_store"):
        with traffic.count():
            pass


def test_parse_ncu_csv():
    text = (
        '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","copy_kernel","dram__bytes_read.sum","Mbyte","1.50"\n'
        '"0","copy_kernel","dram__bytes_write.sum","byte","1,024"\n'
    )
    (row,) = traffic.parse_ncu_csv("==PROF== noise\n" + text)
    assert row["kernel"] == "copy_kernel" and row["dram_read"] == 1.5e6 and row["dram_write"] == 1024


def test_plots_draw_and_refuse_empty_input():
    import matplotlib

    matplotlib.use("Agg")
    from gpulab import bench

    n = 40
    src, dst = torch.randn(4, 10), torch.empty(n)
    with traffic.count(src=src) as c:
        _copy[(3,)](src, dst, n, BLOCK=16)
    ax = traffic.plot_rows(c, "src", [(0, 0, 0), (1, 0, 0), (2, 0, 0)])
    assert ax.images
    assert traffic.rows_touched(c, "src", [(0, 0, 0), (2, 0, 0)]).tolist() == [
        [True, True, False, False],
        [False, False, False, True],
    ]
    r = bench.record(lesson="00", case="ncu copy", bytes=1e6)
    r.params.update(dram_read=6e5, dram_write=5e5)
    assert traffic.plot_dram([r]).patches
    with pytest.raises(ValueError, match="no Nsight Compute"):
        traffic.plot_dram([bench.record(lesson="00", case="x")])
