"""Every public callable of lesson 0 (gpulab.memory) refuses bad input with a ValueError or TypeError that names the
argument: one table, one row per (callable, bad argument). Each row fails before any kernel runs."""

import math

import numpy as np
import pytest
import torch

from gpulab import check, memory
from gpulab.bench import Result

NAN = math.nan


def _x(*shape, dtype=torch.float32):
    return check.random_tensor(*shape, dtype=dtype)


def _sweep(**change):
    kw = dict(x=_x(100), n=100, programs=3, iters=1, block=16) | change
    return memory.working_set_sweep(**kw)


def _copy(**change):
    kw = dict(src=_x(17)) | change
    return memory.copy(**kw)


def _plan(**change):
    kw = dict(n=10, bytes_to_read=100, block=16, programs=3) | change
    return memory.sweep_plan(**kw)


def _reference(**change):
    kw = dict(x=_x(10), n=10, programs=2, iters=3, block=4) | change
    return memory.sweep_reference(**kw)


# (id, call, exception type, words the message must contain)
BAD = [
    # copy
    ("copy src=list", lambda: _copy(src=[1.0, 2.0]), TypeError, "src must be a torch.Tensor"),
    ("copy src=ndarray", lambda: _copy(src=np.ones(3, dtype=np.float32)), TypeError, "src must be a torch.Tensor"),
    ("copy src=3.0", lambda: _copy(src=3.0), TypeError, "src must be a torch.Tensor"),
    ("copy src=None", lambda: _copy(src=None), TypeError, "src must be a torch.Tensor"),
    ("copy src transposed", lambda: _copy(src=_x(8, 6).t()), ValueError, "src.contiguous()"),
    ("copy src strided", lambda: _copy(src=_x(34)[::2]), ValueError, "src must be contiguous"),
    ("copy out shape", lambda: _copy(out=torch.empty(16)), ValueError, "out must be"),
    ("copy out dtype", lambda: _copy(out=torch.empty(17, dtype=torch.float16)), ValueError, "out must be"),
    ("copy out same numel", lambda: _copy(out=torch.empty(17, 1)), ValueError, "out must be"),
    ("copy out strided", lambda: _copy(out=torch.empty(34)[::2]), ValueError, "out must be"),
    ("copy out=list", lambda: _copy(out=[0.0] * 17), TypeError, "out must be a torch.Tensor"),
    ("copy block=0", lambda: _copy(block=0), ValueError, "block must be a positive integer"),
    ("copy block<0", lambda: _copy(block=-64), ValueError, "block must be a positive integer"),
    ("copy block=100", lambda: _copy(block=100), ValueError, "block must be a power of two"),
    ("copy block=64.0", lambda: _copy(block=64.0), TypeError, "block must be a positive integer"),
    ("copy_reference src=list", lambda: memory.copy_reference([1.0]), TypeError, "src must be a torch.Tensor"),
    # the sweep kernel
    (
        "working_set_sweep programs share a factor",
        lambda: _sweep(x=_x(256), n=256, programs=2, iters=4, block=64),
        ValueError,
        "sweep_plan",
    ),  # fmt: skip
    ("working_set_sweep n=0", lambda: _sweep(n=0), ValueError, "n must be between 1 and x.numel()=100"),
    ("working_set_sweep n<0", lambda: _sweep(n=-1), ValueError, "n must be between 1 and x.numel()=100"),
    ("working_set_sweep n>numel", lambda: _sweep(n=101), ValueError, "n must be between 1 and x.numel()=100"),
    ("working_set_sweep n=50.0", lambda: _sweep(n=50.0), TypeError, "n must be an integer"),
    ("working_set_sweep programs=0", lambda: _sweep(programs=0), ValueError, "programs"),
    ("working_set_sweep programs<0", lambda: _sweep(programs=-1), ValueError, "programs"),
    ("working_set_sweep programs=3.0", lambda: _sweep(programs=3.0), TypeError, "programs"),
    ("working_set_sweep iters<0", lambda: _sweep(iters=-2), ValueError, "iters"),
    ("working_set_sweep iters=0", lambda: _sweep(iters=0), ValueError, "iters"),
    ("working_set_sweep block=0", lambda: _sweep(block=0), ValueError, "block"),
    ("working_set_sweep block=12", lambda: _sweep(block=12), ValueError, "block must be a power of two"),
    ("working_set_sweep x fp16", lambda: _sweep(x=_x(64, dtype=torch.float16), n=64), ValueError, "x must be float32"),
    ("working_set_sweep x strided", lambda: _sweep(x=_x(128)[::2], n=64), ValueError, "x must be contiguous"),
    ("working_set_sweep x=list", lambda: _sweep(x=[1.0] * 64, n=64), TypeError, "x must be a torch.Tensor"),
    ("check_sweep_args iters=1.5", lambda: memory.check_sweep_args(_x(8), 8, 1, 1.5, 4), TypeError, "iters"),
    # the schedule on the host
    ("sweep_plan n=0", lambda: _plan(n=0), ValueError, "n must be a positive integer"),
    ("sweep_plan n<0", lambda: _plan(n=-5), ValueError, "n must be a positive integer"),
    ("sweep_plan n=2.5", lambda: _plan(n=2.5), TypeError, "n must be a positive integer"),
    ("sweep_plan programs=0", lambda: _plan(programs=0), ValueError, "programs"),
    ("sweep_plan block=0", lambda: _plan(block=0), ValueError, "block"),
    ("sweep_plan bytes_to_read<0", lambda: _plan(bytes_to_read=-1), ValueError, "bytes_to_read"),
    ("sweep_plan bytes_to_read=nan", lambda: _plan(bytes_to_read=NAN), ValueError, "bytes_to_read"),
    ("sweep_plan itemsize=0", lambda: memory.sweep_plan(10, 100, 16, 3, itemsize=0), ValueError, "itemsize"),
    ("chunk_schedule n_chunks=0", lambda: memory.chunk_schedule(0, 3, 2), ValueError, "n_chunks"),
    ("chunk_schedule programs=1.0", lambda: memory.chunk_schedule(4, 1.0, 2), TypeError, "programs"),
    ("chunk_schedule iters<0", lambda: memory.chunk_schedule(4, 3, -1), ValueError, "iters"),
    ("sweep_reference x=list", lambda: _reference(x=[1.0] * 10), TypeError, "x must be a torch.Tensor"),
    ("sweep_reference n>numel", lambda: _reference(n=11), ValueError, "n must be between 1 and x.numel()=10"),
    ("sweep_reference block=0", lambda: _reference(block=0), ValueError, "block"),
    ("sweep_reference programs=0", lambda: _reference(programs=0), ValueError, "programs"),
    ("sweep_data n=0", lambda: memory.sweep_data(0), ValueError, "n must be a positive integer"),
    ("sweep_data n=1e3", lambda: memory.sweep_data(1e3), TypeError, "n must be a positive integer"),
    ("sweep_data seed<0", lambda: memory.sweep_data(8, seed=-1), ValueError, "seed"),
    ("working_set_sizes cpu_max=0", lambda: memory.working_set_sizes(cpu_max=0), ValueError, "cpu_max"),
    ("working_set_sizes smallest=0.5", lambda: memory.working_set_sizes(smallest=0.5), TypeError, "smallest"),
    (
        "working_set_sizes smallest>max",
        lambda: memory.working_set_sizes(cpu_max=4096, smallest=1 << 14),
        ValueError,
        "smallest=16384",
    ),  # fmt: skip
    ("working_sets sizes=[]", lambda: memory.working_sets([]), ValueError, "sizes is empty"),
    ("working_sets sizes=16384", lambda: memory.working_sets(16384), TypeError, "sizes must be a list"),
    # measuring: checked before any launch
    ("measure_sweep sizes=[0]", lambda: memory.measure_sweep(sizes=[0]), ValueError, "sizes[0]"),
    ("measure_sweep sizes=[-16384]", lambda: memory.measure_sweep(sizes=[-16384]), ValueError, "sizes[0]"),
    ("measure_sweep sizes=[16384.0]", lambda: memory.measure_sweep(sizes=[16384.0]), TypeError, "sizes[0]"),
    ("measure_sweep sizes=[6]", lambda: memory.measure_sweep(sizes=[6]), ValueError, "multiple of 4"),
    ("measure_sweep sizes=[]", lambda: memory.measure_sweep(sizes=[]), ValueError, "sizes is empty"),
    ("measure_sweep programs=0", lambda: memory.measure_sweep(sizes=[4096], programs=0), ValueError, "programs"),
    ("measure_sweep block=0", lambda: memory.measure_sweep(sizes=[4096], block=0), ValueError, "block"),
    (
        "measure_sweep bytes_to_read=inf",
        lambda: memory.measure_sweep(sizes=[4096], bytes_to_read=math.inf),
        ValueError,
        "bytes_to_read",
    ),  # fmt: skip
    ("measure_sweep check='yes'", lambda: memory.measure_sweep(sizes=[4096], check="yes"), TypeError, "check"),
    ("measure_sweep progress=1", lambda: memory.measure_sweep(sizes=[4096], progress=1), TypeError, "progress"),
    ("benchmark progress='bar'", lambda: memory.benchmark(progress="bar"), TypeError, "progress"),
    # figures
    ("plot_sweep results=[1.0]", lambda: memory.plot_sweep([1.0]), TypeError, "results[0]"),
    ("plot_sweep results=5", lambda: memory.plot_sweep(5), TypeError, "results must be"),
    (
        "plot_sweep no sweep record",
        lambda: memory.plot_sweep([Result(lesson="00", case="copy", ms=1.0)]),
        ValueError,
        "working-set sweep",
    ),  # fmt: skip
    ("plot_sweep ax='axes'", lambda: memory.plot_sweep([], ax="axes"), TypeError, "ax must be"),
    ("plot_sweep title=1", lambda: memory.plot_sweep([], title=1), TypeError, "title must be"),
    ("plot_sweep gpu=B9000", lambda: memory.plot_sweep([], gpu="B9000"), ValueError, "gpu='B9000'"),
    ("plot_hierarchy gpu=B9000", lambda: memory.plot_hierarchy("B9000"), ValueError, "gpu='B9000'"),
    ("plot_hierarchy ax=1", lambda: memory.plot_hierarchy(ax=1), TypeError, "ax must be"),
    ("plot_ridge_points specs=[]", lambda: memory.plot_ridge_points([]), ValueError, "specs is empty"),
    ("plot_ridge_points specs=[3]", lambda: memory.plot_ridge_points([3]), TypeError, "gpu must be"),
    (
        "plot_ridge_points dtype=int8",
        lambda: memory.plot_ridge_points(["H100"], dtype="int8"),
        ValueError,
        "dtype='int8'",
    ),  # fmt: skip
    ("human_bytes b<0", lambda: memory.human_bytes(-1), ValueError, "b must be >= 0"),
    ("human_bytes b='1'", lambda: memory.human_bytes("1"), TypeError, "b must be a real number"),
]


@pytest.mark.parametrize(("call", "kind", "words"), [pytest.param(*row[1:], id=row[0]) for row in BAD])
def test_bad_input_is_refused_naming_the_argument(call, kind, words):
    with pytest.raises(kind) as e:
        call()
    assert words in str(e.value)
