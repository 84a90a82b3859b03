"""Every public callable of lesson 1 (gpulab.roofline) refuses bad input with a ValueError or TypeError that names
the argument: one table, one row per (callable, bad argument). Each row fails before any kernel runs."""

import math

import matplotlib.pyplot as plt
import pytest
import torch

from gpulab import check, roofline
from gpulab.bench import Result

H100 = roofline.Ceilings.from_spec("H100")
GOOD = roofline.gemm(4, 4, 4, "fp16")
NAN, INF = math.nan, math.inf


def _x(*shape, dtype=torch.float32):
    return check.random_tensor(*shape, dtype=dtype)


def _ceilings(**change):
    kw = dict(device="GPU", source="test", hbm_gbps=1000.0, mode="cuda") | change
    return roofline.Ceilings(**kw)


def _intensity(**change):
    kw = dict(name="op", flops=1.0, bytes=1.0, compute="fp32", dtype="float32") | change
    return roofline.Intensity(**kw)


def _sweep(**change):
    kw = dict(x=_x(256), n=256, programs=3, iters=1, block=16) | change
    return roofline.l2_sweep(**kw)


def _fma(**change):
    kw = dict(x=_x(4, 8), iters=1) | change
    return roofline.fma_chain(**kw)


def _axes():
    return plt.subplots()[1]


# (id, call, exception type, words the message must contain: the argument's name, and where useful the value)
BAD = [
    # counting: sizes must be positive integers, dtypes known, flags bools
    ("vector_add n=0", lambda: roofline.vector_add(0), ValueError, "n must be a positive integer"),
    ("vector_add n<0", lambda: roofline.vector_add(-4), ValueError, "n must be a positive integer"),
    ("vector_add n=2.5", lambda: roofline.vector_add(2.5), TypeError, "n must be a positive integer"),
    ("vector_add n=4.0", lambda: roofline.vector_add(4.0), TypeError, "n must be a positive integer"),
    ("vector_add n=True", lambda: roofline.vector_add(True), TypeError, "n must be a positive integer"),
    ("vector_add n='8'", lambda: roofline.vector_add("8"), TypeError, "n must be a positive integer"),
    ("vector_add dtype=tf32", lambda: roofline.vector_add(8, "tf32"), ValueError, "dtype='tf32'"),
    ("softmax rows=0", lambda: roofline.softmax(0, 3), ValueError, "rows"),
    ("softmax cols=0", lambda: roofline.softmax(3, 0), ValueError, "cols"),
    ("softmax dtype=float64", lambda: roofline.softmax(3, 3, "float64"), ValueError, "dtype='float64'"),
    ("gemm n<0", lambda: roofline.gemm(1, -2, 3), ValueError, "n must be"),
    ("gemm k=0", lambda: roofline.gemm(1, 2, 0), ValueError, "k must be"),
    ("gemm m=1.5", lambda: roofline.gemm(1.5, 2, 2), TypeError, "m must be"),
    ("gemm dtype=int8", lambda: roofline.gemm(2, 2, 2, "int8"), ValueError, "dtype='int8'"),
    ("gemm dtype=int32", lambda: roofline.gemm(2, 2, 2, torch.int32), ValueError, "dtype=torch.int32"),
    ("gemm dtype=float64", lambda: roofline.gemm(2, 2, 2, "float64"), ValueError, "dtype='float64'"),
    ("gemm dtype=None", lambda: roofline.gemm(2, 2, 2, None), TypeError, "dtype must be a torch dtype"),
    ("gemm dtype=2", lambda: roofline.gemm(2, 2, 2, 2), TypeError, "dtype must be a torch dtype"),
    ("attention_naive seq_k<0", lambda: roofline.attention_naive(1, 1, 4, -4, 8), ValueError, "seq_k"),
    ("attention_naive batch=0", lambda: roofline.attention_naive(0, 1, 4, 4, 8), ValueError, "batch"),
    ("attention_naive head_dim=8.0", lambda: roofline.attention_naive(1, 1, 4, 4, 8.0), TypeError, "head_dim"),
    ("attention_tiled heads=0", lambda: roofline.attention_tiled(1, 0, 4, 4, 8), ValueError, "heads"),
    ("attention_tiled seq_q=0", lambda: roofline.attention_tiled(1, 1, 0, 4, 8), ValueError, "seq_q"),
    (
        "attention_tiled causal='yes'",
        lambda: roofline.attention_tiled(1, 1, 4, 4, 8, causal="yes"),
        TypeError,
        "causal",
    ),
    ("attention_naive causal=1", lambda: roofline.attention_naive(1, 1, 4, 4, 8, causal=1), TypeError, "causal"),
    ("lstm_step batch=0", lambda: roofline.lstm_step(0, 3, 5), ValueError, "batch"),
    ("lstm_step input_size<0", lambda: roofline.lstm_step(2, -3, 5), ValueError, "input_size"),
    ("lstm_step hidden=5.5", lambda: roofline.lstm_step(2, 3, 5.5), TypeError, "hidden"),
    ("lstm_sequence seq=0", lambda: roofline.lstm_sequence(2, 0, 3, 5), ValueError, "seq"),
    ("lstm_sequence layers<0", lambda: roofline.lstm_sequence(2, 3, 3, 5, layers=-1), ValueError, "layers"),
    (
        "lstm_sequence weights_on_chip='no'",
        lambda: roofline.lstm_sequence(2, 3, 3, 5, weights_on_chip="no"),
        ValueError,
        "weights_on_chip",
    ),  # fmt: skip
    ("course_operations dtype=int8", lambda: roofline.course_operations("int8"), ValueError, "dtype='int8'"),
    ("dtype_and_size allow_tf32=1", lambda: roofline.dtype_and_size("tf32", allow_tf32=1), TypeError, "allow_tf32"),
    ("dtype_and_size tf32 not allowed", lambda: roofline.dtype_and_size("tf32"), ValueError, "dtype='tf32'"),
    # Intensity records: an operation that moves no bytes has no intensity
    ("Intensity bytes=0", lambda: _intensity(bytes=0), ValueError, "bytes must be > 0"),
    ("Intensity bytes<0", lambda: _intensity(bytes=-8), ValueError, "bytes must be > 0"),
    ("Intensity bytes=nan", lambda: _intensity(bytes=NAN), ValueError, "bytes must be a finite number"),
    ("Intensity flops<0", lambda: _intensity(flops=-1), ValueError, "flops must be >= 0"),
    ("Intensity flops=inf", lambda: _intensity(flops=INF), ValueError, "flops must be a finite number"),
    ("Intensity flops='1'", lambda: _intensity(flops="1"), TypeError, "flops must be a real number"),
    ("Intensity compute=fp64", lambda: _intensity(compute="fp64"), ValueError, "compute='fp64'"),
    ("Intensity name=None", lambda: _intensity(name=None), TypeError, "name must be a string"),
    # the model
    ("attainable intensity<0", lambda: roofline.attainable(-1, 10, 10), ValueError, "intensity"),
    ("attainable intensity=nan", lambda: roofline.attainable(NAN, 10, 10), ValueError, "intensity"),
    ("attainable intensity='1'", lambda: roofline.attainable("1", 10, 10), TypeError, "intensity"),
    ("attainable peak=0", lambda: roofline.attainable(1, 0, 10), ValueError, "peak_tflops"),
    ("attainable bandwidth<0", lambda: roofline.attainable(1, 10, -5), ValueError, "bandwidth_gbps"),
    ("attainable bandwidth=inf", lambda: roofline.attainable(1, 10, INF), ValueError, "bandwidth_gbps"),
    ("ridge_point peak=0", lambda: roofline.ridge_point(0, 10), ValueError, "peak_tflops"),
    ("ridge_point bandwidth=0", lambda: roofline.ridge_point(10, 0), ValueError, "bandwidth_gbps"),
    ("ridge_point peak=True", lambda: roofline.ridge_point(True, 10), TypeError, "peak_tflops"),
    ("bound intensity<0", lambda: roofline.bound(-1, 10, 10), ValueError, "intensity"),
    ("bound bandwidth=nan", lambda: roofline.bound(1, 10, NAN), ValueError, "bandwidth_gbps"),
    # ceilings
    ("Ceilings hbm_gbps=0", lambda: _ceilings(hbm_gbps=0), ValueError, "hbm_gbps must be > 0"),
    ("Ceilings hbm_gbps='fast'", lambda: _ceilings(hbm_gbps="fast"), TypeError, "hbm_gbps"),
    ("Ceilings l2_gbps<0", lambda: _ceilings(l2_gbps=-1.0), ValueError, "l2_gbps must be > 0"),
    ("Ceilings bf16_tflops=inf", lambda: _ceilings(bf16_tflops=INF), ValueError, "bf16_tflops"),
    ("Ceilings mode=gpu", lambda: _ceilings(mode="gpu"), ValueError, "mode='gpu'"),
    ("Ceilings device=None", lambda: _ceilings(device=None), TypeError, "device must be a string"),
    ("Ceilings records=[1.0]", lambda: _ceilings(records=[1.0]), TypeError, "records[0]"),
    ("Ceilings.bandwidth L3", lambda: H100.bandwidth("L3"), ValueError, "level='L3'"),
    ("Ceilings.compute fp64", lambda: H100.compute("fp64"), ValueError, "roof='fp64'"),
    ("Ceilings.ridge fp64", lambda: H100.ridge("fp64"), ValueError, "roof='fp64'"),
    ("Ceilings.attainable intensity<0", lambda: H100.attainable(-1.0), ValueError, "intensity"),
    ("Ceilings.attainable unknown roof", lambda: _ceilings().attainable(-1.0, "bf16"), ValueError, "intensity"),
    ("Ceilings.attainable level=L0", lambda: H100.attainable(1.0, "bf16", "L0"), ValueError, "level='L0'"),
    ("Ceilings.from_spec B9000", lambda: roofline.Ceilings.from_spec("B9000"), ValueError, "gpu='B9000'"),
    ("Ceilings.from_results [1.0]", lambda: roofline.Ceilings.from_results([1.0]), TypeError, "results[0]"),
    ("Ceilings.from_results no HBM", lambda: roofline.Ceilings.from_results([]), ValueError, "no HBM ceiling"),
    (
        "Ceilings.from_results source=1",
        lambda: roofline.Ceilings.from_results(H100.to_results(), source=1),
        TypeError,
        "source",
    ),  # fmt: skip
    ("ceilings gpu=B9000", lambda: roofline.ceilings("B9000"), ValueError, "gpu='B9000'"),
    ("ceilings gpu=5", lambda: roofline.ceilings(5), TypeError, "gpu must be"),
    ("ceilings root=5", lambda: roofline.ceilings("H100", root=5), TypeError, "root must be"),
    ("targets c='H100'", lambda: roofline.targets("H100"), TypeError, "c must be a roofline.Ceilings"),
    # kernels
    ("fma_chain x [3, 8]", lambda: _fma(x=_x(3, 8)), ValueError, "shape [4, n >= 1]"),
    ("fma_chain x fp16", lambda: _fma(x=_x(4, 8, dtype=torch.float16)), ValueError, "float32"),
    ("fma_chain x strided", lambda: _fma(x=_x(8, 4).t()), ValueError, "contiguous"),
    ("fma_chain x list", lambda: _fma(x=[[1.0]] * 4), TypeError, "x must be a torch.Tensor"),
    ("fma_chain iters=0", lambda: _fma(iters=0), ValueError, "iters must be a positive integer"),
    ("fma_chain iters=2.0", lambda: _fma(iters=2.0), TypeError, "iters must be a positive integer"),
    ("fma_chain b=nan", lambda: _fma(b=NAN), ValueError, "b must be a finite number"),
    ("fma_chain c='1'", lambda: _fma(c="1"), TypeError, "c must be a real number"),
    ("fma_chain block=0", lambda: _fma(block=0), ValueError, "block must be a positive integer"),
    ("fma_chain block=48", lambda: _fma(block=48), ValueError, "block must be a power of two"),
    ("fma_chain num_warps=3", lambda: _fma(num_warps=3), ValueError, "num_warps=3"),
    ("fma_reference steps<0", lambda: roofline.fma_reference(_x(4, 2), -1), ValueError, "steps"),
    ("fma_reference steps=1.5", lambda: roofline.fma_reference(_x(4, 2), 1.5), TypeError, "steps"),
    ("fma_reference x=list", lambda: roofline.fma_reference([1.0], 1), TypeError, "x must be a torch.Tensor"),
    ("fma_closed_form b=1", lambda: roofline.fma_closed_form(_x(4, 2), 3, b=1.0), ValueError, "b=1"),
    ("fma_closed_form c=inf", lambda: roofline.fma_closed_form(_x(4, 2), 3, c=INF), ValueError, "c must be"),
    ("l2_sweep programs share a factor", lambda: _sweep(block=64, programs=2), ValueError, "programs=2"),
    ("l2_sweep n=0", lambda: _sweep(n=0), ValueError, "n must be between 1 and x.numel"),
    ("l2_sweep n=64.0", lambda: _sweep(n=64.0), TypeError, "n must be an integer"),
    ("l2_sweep x fp16", lambda: _sweep(x=_x(256, dtype=torch.float16)), ValueError, "x must be float32"),
    ("l2_sweep iters=0", lambda: _sweep(iters=0), ValueError, "iters"),
    ("l2_sweep programs=2.5", lambda: _sweep(programs=2.5), TypeError, "programs"),
    ("l2_sweep block=0", lambda: _sweep(block=0), ValueError, "block"),
    ("l2_sweep block=24", lambda: _sweep(block=24), ValueError, "block must be a power of two"),
    # measurements: checked before anything is allocated or launched
    ("measure_hbm n=0", lambda: roofline.measure_hbm(n=0), ValueError, "n must be"),
    ("measure_hbm n=1e3", lambda: roofline.measure_hbm(n=1e3), TypeError, "n must be"),
    ("measure_cache level=HBM", lambda: roofline.measure_cache("HBM"), ValueError, "level='HBM'"),
    ("measure_cache sizes=[0]", lambda: roofline.measure_cache("L2", sizes=[0]), ValueError, "sizes[0]"),
    ("measure_cache sizes=[-4096]", lambda: roofline.measure_cache("L2", sizes=[-4096]), ValueError, "sizes[0]"),
    ("measure_cache sizes=[4096.0]", lambda: roofline.measure_cache("L1", sizes=[4096.0]), TypeError, "sizes[0]"),
    ("measure_cache sizes=[4098]", lambda: roofline.measure_cache("L1", sizes=[4098]), ValueError, "multiple of 4"),
    ("measure_cache sizes=[]", lambda: roofline.measure_cache("L1", sizes=[]), ValueError, "sizes is empty"),
    ("measure_cache programs=0", lambda: roofline.measure_cache("L1", programs=0), ValueError, "programs"),
    (
        "measure_cache bytes_to_read<0",
        lambda: roofline.measure_cache("L1", bytes_to_read=-1),
        ValueError,
        "bytes_to_read",
    ),  # fmt: skip
    ("measure_cache block=1000", lambda: roofline.measure_cache("L1", block=1000), ValueError, "block"),
    ("measure_matmul roof=fp64", lambda: roofline.measure_matmul("fp64"), ValueError, "roof='fp64'"),
    (
        "measure_matmul shapes=[(2, 2)]",
        lambda: roofline.measure_matmul("fp32", shapes=[(2, 2)]),
        ValueError,
        "shapes[0]",
    ),  # fmt: skip
    (
        "measure_matmul shapes k=0",
        lambda: roofline.measure_matmul("fp32", shapes=[(2, 2, 0)]),
        ValueError,
        "shapes[0].k",
    ),  # fmt: skip
    ("measure_matmul sets=0", lambda: roofline.measure_matmul("fp32", sets=0), ValueError, "sets"),
    ("measure_matmul peer='yes'", lambda: roofline.measure_matmul("bf16", peer="yes"), TypeError, "peer"),
    ("measure_matmul seed=0.5", lambda: roofline.measure_matmul("bf16", seed=0.5), TypeError, "seed"),
    ("measure_fma configs block=48", lambda: roofline.measure_fma([(48, 4, None)]), ValueError, "configs[0].block"),
    (
        "measure_fma configs warps=5",
        lambda: roofline.measure_fma([(64, 5, None)]),
        ValueError,
        "configs[0].num_warps",
    ),  # fmt: skip
    ("measure_fma configs per_sm=0", lambda: roofline.measure_fma([(64, 4, 0)]), ValueError, "configs[0].per_sm"),
    ("measure_fma configs=[]", lambda: roofline.measure_fma([]), ValueError, "configs is empty"),
    ("measure_ceilings progress=5", lambda: roofline.measure_ceilings(progress=5), TypeError, "progress"),
    ("benchmark progress='bar'", lambda: roofline.benchmark(progress="bar"), TypeError, "progress"),
    # placing and plotting
    ("placement results=[1.0]", lambda: roofline.placement([1.0], H100), TypeError, "results[0]"),
    ("placement results=5", lambda: roofline.placement(5, H100), TypeError, "results must be"),
    ("placement ceilings='H100'", lambda: roofline.placement([GOOD], "H100"), TypeError, "ceilings must be"),
    (
        "placement unknown roof",
        lambda: roofline.placement(
            [Result(lesson="x", case="c", ms=1.0, flops=1.0, bytes=1.0, params={"roof": "fp8"})], H100
        ),
        ValueError,
        "roof='fp8'",
    ),  # fmt: skip
    ("placement_table results='abc'", lambda: roofline.placement_table("abc", H100), TypeError, "results"),
    (
        "intensity_table records=[Result]",
        lambda: roofline.intensity_table([Result(lesson="x", case="c", ms=1.0)], H100),
        TypeError,
        "records[0]",
    ),  # fmt: skip
    ("intensity_table ceilings=1", lambda: roofline.intensity_table([GOOD], 1), TypeError, "ceilings must be"),
    ("plot ax='axes'", lambda: roofline.plot([GOOD], H100, ax="axes"), TypeError, "ax must be"),
    ("plot title=3", lambda: roofline.plot([GOOD], H100, ax=_axes(), title=3), TypeError, "title must be"),
    ("plot results=[None]", lambda: roofline.plot([None], H100), TypeError, "results[0]"),
]


@pytest.mark.parametrize(("call", "kind", "words"), [pytest.param(*row[1:], id=row[0]) for row in BAD])
def test_bad_input_is_refused_naming_the_argument(call, kind, words):
    with pytest.raises(kind) as e:
        call()
    assert isinstance(e.value, (ValueError, TypeError))
    assert words in str(e.value)


def test_type_errors_are_value_errors_too():
    """Callers that catch ValueError (as before the vocabulary) still catch a wrong type."""
    with pytest.raises(ValueError, match="n must be a positive integer"):
        roofline.vector_add(2.5)
