"""Lesson 0 kernels (gpulab.memory) in Triton's CPU interpreter: copy and the working-set sweep."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.axes  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from gpulab import check, hardware, memory  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


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


@pytest.mark.parametrize("make", [lambda: check.random_tensor(8, 6).t(), lambda: check.random_tensor(34)[::2]])
def test_copy_rejects_non_contiguous_src(make):
    with pytest.raises(ValueError) as e:
        memory.copy(make())
    assert "src must be contiguous" in str(e.value) and "src.contiguous()" in str(e.value)


@pytest.mark.parametrize(
    "make_out",
    [
        lambda: torch.empty(16),  # wrong shape
        lambda: torch.empty(17, dtype=torch.float16),  # wrong dtype
        lambda: torch.empty(17, 1),  # same numel, wrong shape
        lambda: torch.empty(34)[::2],  # not contiguous
    ],
)
def test_copy_rejects_wrong_out(make_out):
    src = check.random_tensor(17)
    with pytest.raises(ValueError) as e:
        memory.copy(src, make_out())
    assert str(e.value).startswith("out must be")


@pytest.mark.parametrize("bad", [[1.0, 2.0], np.ones(3, dtype=np.float32), 3.0, None])
def test_copy_rejects_non_tensors(bad):
    with pytest.raises(TypeError) as e:
        memory.copy(bad)
    assert "src must be a torch.Tensor" in str(e.value)


def test_copy_rejects_non_tensor_out():
    with pytest.raises(TypeError, match="out"):
        memory.copy(check.random_tensor(3), [0.0, 0.0, 0.0])


# ----------------------------------------------------------------------------------------------------------------
# sweep plan and schedule


def _bytes_by_brute_force(n, block, programs, iters, itemsize):
    """Walk the kernel's loop program by program and add up what each masked load reads."""
    n_chunks = math.ceil(n / block)
    total = 0
    for p in range(programs):
        chunk = p % n_chunks
        for _ in range(iters):
            total += sum(1 for lane in range(block) if chunk * block + lane < n) * itemsize
            chunk = (chunk + programs) % n_chunks
    return total


@pytest.mark.parametrize(
    ("n", "block", "programs", "bytes_to_read", "itemsize"),
    [
        (17, 4, 3, 100, 4),  # 5 chunks, ragged tail of 1
        (1000, 64, 4, 10_000, 4),  # 16 chunks: 4 is bumped to 5
        (4097, 64, 6, 50_000, 2),  # 65 chunks, tail of 1, fp16
        (61, 8, 1, 0, 4),  # one program, nothing asked beyond one pass
        (5, 16, 3, 1000, 4),  # one chunk smaller than a block
    ],
)
def test_sweep_plan(n, block, programs, bytes_to_read, itemsize):
    plan = memory.sweep_plan(n, bytes_to_read, block, programs, itemsize=itemsize)
    p, iters, n_chunks = plan["programs"], plan["iters"], plan["n_chunks"]
    assert n_chunks == math.ceil(n / block)
    # the smallest program count >= the request that is coprime to the chunk count
    assert p >= programs and math.gcd(p, n_chunks) == 1
    assert all(math.gcd(q, n_chunks) != 1 for q in range(programs, p))
    # at least one full pass over the working set, and at least the bytes asked for (counting full chunks)
    assert p * iters >= n_chunks
    assert p * iters * block * itemsize >= bytes_to_read
    if iters > 1:  # and no more steps than needed
        assert p * (iters - 1) < n_chunks or p * (iters - 1) * block * itemsize < bytes_to_read
    assert plan["bytes"] == _bytes_by_brute_force(n, block, p, iters, itemsize)


def test_sweep_plan_bytes_for_an_exact_multiple():
    plan = memory.sweep_plan(4096 * 4, 1 << 20, 4096, 3)
    assert plan["bytes"] == plan["programs"] * plan["iters"] * 4096 * 4


@pytest.mark.parametrize(
    ("args", "word"),
    [((0, 100, 16, 3), "n"), ((-5, 100, 16, 3), "n"), ((10, 100, 16, 0), "programs"), ((10, 100, 0, 3), "block")],
)
def test_sweep_plan_rejects_bad_arguments(args, word):
    with pytest.raises(ValueError) as e:
        memory.sweep_plan(*args)
    assert word in str(e.value)


@pytest.mark.parametrize(("n_chunks", "programs"), [(1, 3), (4, 3), (16, 5), (65, 7), (12, 7), (7, 12)])
def test_every_program_visits_every_chunk_when_coprime(n_chunks, programs):
    assert math.gcd(n_chunks, programs) == 1
    sched = memory.chunk_schedule(n_chunks, programs, n_chunks)
    assert sched.shape == (programs, n_chunks)
    for row in sched:
        assert sorted(row.tolist()) == list(range(n_chunks))
    # at each step the grid reads consecutive chunks: the grid as a whole marches through the working set
    assert sched.T.reshape(-1).tolist() == [k % n_chunks for k in range(programs * n_chunks)]


def test_programs_sharing_a_factor_miss_chunks():
    """The structural check above can fail: with P=2 and C=4, program 0 only ever sees chunks 0 and 2."""
    sched = memory.chunk_schedule(4, 2, 4)
    assert sorted(set(sched[0].tolist())) == [0, 2]


# ----------------------------------------------------------------------------------------------------------------
# sweep kernel


@pytest.mark.parametrize(
    ("n", "block", "programs"),
    [
        (1, 4096, 3),
        (17, 4096, 3),
        (4096, 4096, 3),
        (4097, 4096, 3),
        (3 * 4096 + 5, 4096, 3),
        (17, 16, 3),
        (1000, 64, 4),
        (333, 32, 2),
        (129, 128, 1),
    ],
)
def test_working_set_sweep_matches_reference(n, block, programs):
    x = memory.sweep_data(n + 50)
    x[n:] = 1e6  # past the working set: must never be read
    plan = memory.sweep_plan(n, 3 * n * 4, block, programs)
    out = memory.working_set_sweep(x, n, plan["programs"], plan["iters"], block)
    assert out.shape == (plan["programs"],) and out.dtype == torch.float32
    assert not torch.isnan(out).any()  # every program stored its sum
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block)
    check.assert_close(out, ref, name="partial sums", context=f"n={n}, block={block}, plan={plan}")


def test_sweep_reference_by_hand():
    x = torch.arange(1.0, 11.0)  # chunks of 4: [1..4]=10, [5..8]=26, [9, 10]=19
    ref = memory.sweep_reference(x, 10, programs=2, iters=3, block=4)
    # program 0 reads chunks 0, 2, 1; program 1 reads 1, 0, 2
    assert ref.tolist() == [10 + 19 + 26, 26 + 10 + 19]
    assert ref.dtype == torch.float64
    out = memory.working_set_sweep(x, 10, 2, 3, 4)
    check.assert_close(out, ref)


def test_working_set_sweep_rejects_programs_sharing_a_factor():
    x = check.random_tensor(256)
    with pytest.raises(ValueError) as e:
        memory.working_set_sweep(x, 256, programs=2, iters=4, block=64)  # 4 chunks
    assert "programs=2" in str(e.value) and "sweep_plan" in str(e.value)


@pytest.mark.parametrize("n", [0, -1, 101])
def test_working_set_sweep_rejects_n_out_of_range(n):
    x = check.random_tensor(100)
    with pytest.raises(ValueError) as e:
        memory.working_set_sweep(x, n, programs=3, iters=1, block=16)
    assert "n must be between 1 and x.numel()=100" in str(e.value)


@pytest.mark.parametrize(("programs", "iters", "word"), [(0, 2, "programs"), (-1, 2, "programs"), (3, -2, "iters")])
def test_working_set_sweep_rejects_bad_programs_and_iters(programs, iters, word):
    x = check.random_tensor(100)
    with pytest.raises(ValueError, match=word):
        memory.working_set_sweep(x, 100, programs, iters, 128)


def test_working_set_sweep_rejects_bad_x():
    with pytest.raises(ValueError, match="x must be float32"):
        memory.working_set_sweep(check.random_tensor(64, dtype=torch.float16), 64, 3, 1, 16)
    with pytest.raises(ValueError, match="x must be contiguous"):
        memory.working_set_sweep(check.random_tensor(128)[::2], 64, 3, 1, 16)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        memory.working_set_sweep([1.0] * 64, 64, 3, 1, 16)


# ----------------------------------------------------------------------------------------------------------------
# measuring and plotting


def test_working_set_sizes_on_cpu():
    sizes = memory.working_set_sizes()
    assert sizes == [2**k for k in range(14, 21)]
    assert sizes[0] == 16 * 1024 and sizes[-1] == 1024 * 1024
    assert memory.working_set_sizes(cpu_max=1 << 16, smallest=1 << 12) == [4096, 8192, 16384, 32768, 65536]


def test_measure_sweep_and_plot():
    sizes = [16384, 65536]
    results = memory.measure_sweep(sizes=sizes)
    assert [r.params["working_set_bytes"] for r in results] == sizes
    for r, w in zip(results, sizes):
        assert r.lesson == "00" and r.case == "working-set sweep" and r.mode == "interpreter"
        assert r.gbps is not None and math.isfinite(r.gbps) and r.gbps > 0
        assert r.bytes >= 2 * w  # at least two passes over the working set
        n_chunks = math.ceil(w // 4 / r.params["block"])
        assert math.gcd(r.params["programs"], n_chunks) == 1
        assert r.params["level"] == hardware.cache_level(w)
        assert r.flops == r.bytes / 4
    ax = memory.plot_sweep(results, title="sweep")
    assert isinstance(ax, matplotlib.axes.Axes)
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == sizes
    assert list(line.get_ydata()) == pytest.approx([r.gbps for r in results])
    assert ax.get_title() == "sweep"
