"""Every public callable of lesson 2 that takes user input refuses bad input with a ValueError or TypeError that
names the argument (runtime.ArgumentTypeError, for a float or bool where an integer belongs, is both)."""

import dataclasses
import re

import pytest
import torch

from gpulab import check, codesign, runtime
from gpulab.bench import Result

GPT2 = codesign.KNOWN_CONFIGS["GPT-2 small"]
LSTM = codesign.KNOWN_CONFIGS["multi-head LSTM (example)"]


def _names(message: str, name: str) -> bool:
    """Does ``message`` name the argument ``name`` as a word (``m``, not the m of 'must')?"""
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message) is not None


def _result(**params):
    return Result(lesson="02", case="x", ms=1.0, flops=1e9, params={"predicted_ms": 1.0, "predicted_tflops": 1.0,
                                                                    "sweep": "K", "x": 1, **params})  # fmt: skip


def _agreement():
    return codesign.pair_agreement([_result(x=1), _result(x=2)])


def _a():
    return check.random_tensor(3, 4)


def _b():
    return check.random_tensor(4, 2)


# (call, error, argument named in the message)
CASES = {
    # the model
    "gemm_time m=-1": (lambda: codesign.gemm_time(-1, 64, 64), ValueError, "m"),
    "gemm_time n=0": (lambda: codesign.gemm_time(64, 0, 64), ValueError, "n"),
    "gemm_time k=2.5": (lambda: codesign.gemm_time(64, 64, 2.5), TypeError, "k"),
    "gemm_time k=64.0": (lambda: codesign.gemm_time(64, 64, 64.0), TypeError, "k"),
    "gemm_time k=True": (lambda: codesign.gemm_time(64, 64, True), TypeError, "k"),
    "gemm_time m='64'": (lambda: codesign.gemm_time("64", 64, 64), TypeError, "m"),
    "gemm_time batch=-3": (lambda: codesign.gemm_time(64, 64, 64, batch=-3), ValueError, "batch"),
    "gemm_time batch=0": (lambda: codesign.gemm_time(64, 64, 64, batch=0), ValueError, "batch"),
    "gemm_time dtype=float17": (lambda: codesign.gemm_time(64, 64, 64, dtype="float17"), ValueError, "dtype"),
    "gemm_time dtype=float64": (lambda: codesign.gemm_time(64, 64, 64, dtype="float64"), ValueError, "dtype"),
    "gemm_time dtype=int32": (lambda: codesign.gemm_time(64, 64, 64, dtype=torch.int32), ValueError, "dtype"),
    "gemm_time dtype=None": (lambda: codesign.gemm_time(64, 64, 64, dtype=None), ValueError, "dtype"),
    "gemm_time bf16 on a T4": (lambda: codesign.gemm_time(64, 64, 64, gpu="T4"), ValueError, "dtype"),
    "gemm_time gpu=H1000": (lambda: codesign.gemm_time(64, 64, 64, gpu="H1000"), ValueError, "gpu"),
    "gemm_time gpu=5": (lambda: codesign.gemm_time(64, 64, 64, gpu=5), TypeError, "gpu"),
    "gemm_time tile=(128,)": (lambda: codesign.gemm_time(64, 64, 64, tile=(128,)), ValueError, "tile"),
    "gemm_time tile=128": (lambda: codesign.gemm_time(64, 64, 64, tile=128), TypeError, "tile"),
    "gemm_time tile=(128,-1)": (lambda: codesign.gemm_time(64, 64, 64, tile=(128, -1)), ValueError, "tile[1]"),
    "gemm_time tile=(0.5,64)": (lambda: codesign.gemm_time(64, 64, 64, tile=(0.5, 64)), TypeError, "tile[0]"),
    "relative_throughput k=0": (lambda: codesign.relative_throughput(64, 64, 0), ValueError, "k"),
    "relative_throughput tile=x": (lambda: codesign.relative_throughput(64, 64, 64, tile="x"), TypeError, "tile"),
    "alignment_penalty k=0": (lambda: codesign.alignment_penalty(0, 16), ValueError, "k"),
    "alignment_penalty n=1.5": (lambda: codesign.alignment_penalty(16, 1.5), TypeError, "n"),
    "alignment_penalty dtype": (lambda: codesign.alignment_penalty(16, 16, "int8"), ValueError, "dtype"),
    "alignment_efficiency k=0": (lambda: codesign.alignment_efficiency(0, 16), ValueError, "k"),
    "alignment_efficiency n=-8": (lambda: codesign.alignment_efficiency(16, -8), ValueError, "n"),
    "tile_quantization m=-5": (lambda: codesign.tile_quantization(-5, 10, (16, 16)), ValueError, "m"),
    "tile_quantization batch=0": (lambda: codesign.tile_quantization(5, 10, (16, 16), 0), ValueError, "batch"),
    "tile_quantization tile=None": (lambda: codesign.tile_quantization(5, 10, None), TypeError, "tile"),
    "wave_quantization sm_count=0": (lambda: codesign.wave_quantization(10, 0), ValueError, "sm_count"),
    "wave_quantization tiles=-1": (lambda: codesign.wave_quantization(-1, 132), ValueError, "tiles"),
    "wave_quantization tiles=1.0": (lambda: codesign.wave_quantization(1.0, 132), TypeError, "tiles"),
    "params prefix=1": (lambda: codesign.gemm_time(8, 8, 8).params(prefix=1), TypeError, "prefix"),
    # the Triton matmul and its reference
    "matmul a=list": (lambda: codesign.matmul_fixed_tile([[1.0]], check.random_tensor(1, 1)), TypeError, "a"),
    "matmul a 1-D": (lambda: codesign.matmul_fixed_tile(check.random_tensor(3), _b()), ValueError, "a"),
    "matmul b 3-D": (lambda: codesign.matmul_fixed_tile(_a(), check.random_tensor(1, 4, 2)), ValueError, "b"),
    "matmul inner sizes": (lambda: codesign.matmul_fixed_tile(_a(), check.random_tensor(5, 2)), ValueError, "b"),
    "matmul b fp16": (
        lambda: codesign.matmul_fixed_tile(_a(), check.random_tensor(4, 2, dtype=torch.float16)),
        ValueError,
        "b",
    ),
    "matmul a float64": (
        lambda: codesign.matmul_fixed_tile(check.random_tensor(3, 4, dtype=torch.float64), _b()),
        ValueError,
        "a",
    ),
    "matmul a bf16 (interpreter)": (
        lambda: codesign.matmul_fixed_tile(check.random_tensor(3, 4, dtype=torch.bfloat16), _b()),
        ValueError,
        "a",
    ),
    "matmul out shape": (lambda: codesign.matmul_fixed_tile(_a(), _b(), torch.empty(2, 3)), ValueError, "out"),
    "matmul out=list": (lambda: codesign.matmul_fixed_tile(_a(), _b(), [0.0]), TypeError, "out"),
    "matmul block_m=24": (lambda: codesign.matmul_fixed_tile(_a(), _b(), block_m=24), ValueError, "block_m"),
    "matmul block_n=-16": (lambda: codesign.matmul_fixed_tile(_a(), _b(), block_n=-16), ValueError, "block_n"),
    "matmul block_k=0": (lambda: codesign.matmul_fixed_tile(_a(), _b(), block_k=0), ValueError, "block_k"),
    "matmul block_k=16.0": (lambda: codesign.matmul_fixed_tile(_a(), _b(), block_k=16.0), TypeError, "block_k"),
    "matmul num_warps=3": (lambda: codesign.matmul_fixed_tile(_a(), _b(), num_warps=3), ValueError, "num_warps"),
    "matmul num_stages=0": (lambda: codesign.matmul_fixed_tile(_a(), _b(), num_stages=0), ValueError, "num_stages"),
    "matmul allow_tf32='no'": (
        lambda: codesign.matmul_fixed_tile(_a(), _b(), allow_tf32="no"),
        TypeError,
        "allow_tf32",
    ),
    "matmul_reference a=None": (lambda: codesign.matmul_reference(None, _b()), TypeError, "a"),
    "matmul_reference inner sizes": (lambda: codesign.matmul_reference(_a(), _a()), ValueError, "b"),
    # configurations and rules
    "check_config dict": (lambda: codesign.check_config({"vocab": 50257}), TypeError, "config"),
    "check_config hidden<0": (
        lambda: codesign.check_config(dataclasses.replace(GPT2, hidden=-768)),
        ValueError,
        "config.hidden",
    ),
    "check_config vocab=0": (
        lambda: codesign.check_config(dataclasses.replace(GPT2, vocab=0)),
        ValueError,
        "config.vocab",
    ),
    "check_config microbatch=1.5": (
        lambda: codesign.check_config(dataclasses.replace(GPT2, microbatch=1.5)),
        TypeError,
        "config.microbatch",
    ),
    "check_config t=0": (
        lambda: codesign.check_config(dataclasses.replace(GPT2, tensor_parallel=0)),
        ValueError,
        "config.tensor_parallel",
    ),
    "check_config ffn=0": (lambda: codesign.check_config(dataclasses.replace(GPT2, ffn=0)), ValueError, "config.ffn"),
    "check_config name=3": (lambda: codesign.check_config(dataclasses.replace(GPT2, name=3)), TypeError, "config.name"),
    "check_config lstm batch=0": (
        lambda: codesign.check_config(dataclasses.replace(LSTM, batch=0)),
        ValueError,
        "config.batch",
    ),
    "check_config gpu": (lambda: codesign.check_config(GPT2, gpu="no such GPU"), ValueError, "gpu"),
    "check_config dtype": (lambda: codesign.check_config(GPT2, dtype="int4"), ValueError, "dtype"),
    "fix_config hidden<0": (
        lambda: codesign.fix_config(dataclasses.replace(GPT2, hidden=-768)),
        ValueError,
        "config.hidden",
    ),
    "fix_config heads=2.0": (
        lambda: codesign.fix_config(dataclasses.replace(GPT2, heads=2.0)),
        TypeError,
        "config.heads",
    ),
    "fix_config str": (lambda: codesign.fix_config("GPT-2 small"), TypeError, "config"),
    "fix_config dtype": (lambda: codesign.fix_config(GPT2, dtype="float64"), ValueError, "dtype"),
    "model_gemms None": (lambda: codesign.model_gemms(None), TypeError, "config"),
    "model_gemms seq=0": (lambda: codesign.model_gemms(dataclasses.replace(GPT2, seq=0)), ValueError, "config.seq"),
    "layer_time gpu": (lambda: codesign.layer_time(GPT2, gpu="Z80"), ValueError, "gpu"),
    "layer_time dtype": (lambda: codesign.layer_time(GPT2, dtype="fp8"), ValueError, "dtype"),
    "heads_options multiple=0": (lambda: codesign.heads_options(768, 12, multiple=0), ValueError, "multiple"),
    "heads_options multiple=-64": (lambda: codesign.heads_options(768, 12, multiple=-64), ValueError, "multiple"),
    "heads_options multiple=64.0": (lambda: codesign.heads_options(768, 12, multiple=64.0), TypeError, "multiple"),
    "heads_options hidden=0": (lambda: codesign.heads_options(0, 12), ValueError, "hidden"),
    "heads_options heads=-1": (lambda: codesign.heads_options(768, -1), ValueError, "heads"),
    "heads_options t=0": (lambda: codesign.heads_options(768, 12, t=0), ValueError, "t"),
    "format_checks int": (lambda: codesign.format_checks(5), TypeError, "checks"),
    "format_checks strings": (lambda: codesign.format_checks(["pass"]), TypeError, "checks[0]"),
    "format_checks title": (lambda: codesign.format_checks([], title=3), TypeError, "title"),
    # sweeps: a given size is used or refused, never replaced by the default
    "sweep_k m=0": (lambda: codesign.sweep_k(ks=[8], m=0, n=8), ValueError, "m"),
    "sweep_k n=-8": (lambda: codesign.sweep_k(ks=[8], m=8, n=-8), ValueError, "n"),
    "sweep_k m=8.5": (lambda: codesign.sweep_k(ks=[8], m=8.5, n=8), TypeError, "m"),
    "sweep_k ks=[]": (lambda: codesign.sweep_k(ks=[], m=8, n=8), ValueError, "ks"),
    "sweep_k ks=[0]": (lambda: codesign.sweep_k(ks=[0], m=8, n=8), ValueError, "ks[0]"),
    "sweep_k ks=[8,-8]": (lambda: codesign.sweep_k(ks=[8, -8], m=8, n=8), ValueError, "ks[1]"),
    "sweep_k ks=[8.0]": (lambda: codesign.sweep_k(ks=[8.0], m=8, n=8), TypeError, "ks[0]"),
    "sweep_k ks=64": (lambda: codesign.sweep_k(ks=64, m=8, n=8), TypeError, "ks"),
    "sweep_k ks='64'": (lambda: codesign.sweep_k(ks="64", m=8, n=8), TypeError, "ks"),
    "sweep_k dtype=float64": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, dtype="float64"), ValueError, "dtype"),
    "sweep_k dtype=int8": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, dtype=torch.int8), ValueError, "dtype"),
    "sweep_k dtype=0": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, dtype=0), ValueError, "dtype"),
    "sweep_k gpu": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, gpu="H1000"), ValueError, "gpu"),
    "sweep_k check=1": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, check=1), TypeError, "check"),
    "sweep_k progress=3": (lambda: codesign.sweep_k(ks=[8], m=8, n=8, progress=3), TypeError, "progress"),
    "sweep_head_dim seq=0": (lambda: codesign.sweep_head_dim(head_dims=[8], batch_heads=1, seq=0), ValueError, "seq"),
    "sweep_head_dim batch_heads=-2": (
        lambda: codesign.sweep_head_dim(head_dims=[8], batch_heads=-2, seq=4),
        ValueError,
        "batch_heads",
    ),
    "sweep_head_dim head_dims=[64,0]": (
        lambda: codesign.sweep_head_dim(head_dims=[64, 0], batch_heads=1, seq=4),
        ValueError,
        "head_dims[1]",
    ),
    "sweep_head_dim head_dims=()": (
        lambda: codesign.sweep_head_dim(head_dims=(), batch_heads=1, seq=4),
        ValueError,
        "head_dims",
    ),
    "sweep_head_dim dtype": (
        lambda: codesign.sweep_head_dim(head_dims=[8], batch_heads=1, seq=4, dtype="tf32"),
        ValueError,
        "dtype",
    ),
    "sweep_waves k=0": (lambda: codesign.sweep_waves(ns=[16], m=4, k=0), ValueError, "k"),
    "sweep_waves m=-4": (lambda: codesign.sweep_waves(ns=[16], m=-4, k=4), ValueError, "m"),
    "sweep_waves ns=[16.5]": (lambda: codesign.sweep_waves(ns=[16.5], m=4, k=4), TypeError, "ns[0]"),
    "sweep_waves ns=[-16]": (lambda: codesign.sweep_waves(ns=[-16], m=4, k=4), ValueError, "ns[0]"),
    "sweep_waves impls=('cublas',)": (
        lambda: codesign.sweep_waves(ns=[16], m=4, k=4, impls=("cublas",)),
        ValueError,
        "impls[0]",
    ),
    "sweep_waves impls='torch'": (lambda: codesign.sweep_waves(ns=[16], m=4, k=4, impls="torch"), TypeError, "impls"),
    "sweep_waves impls=()": (lambda: codesign.sweep_waves(ns=[16], m=4, k=4, impls=()), ValueError, "impls"),
    "sweep_waves bf16 Triton (interpreter)": (
        lambda: codesign.sweep_waves(ns=[16], m=4, k=4, dtype="bf16"),
        ValueError,
        "dtype",
    ),
    "pair_agreement threshold<0": (lambda: codesign.pair_agreement([], threshold=-0.1), ValueError, "threshold"),
    "pair_agreement threshold=nan": (
        lambda: codesign.pair_agreement([], threshold=float("nan")),
        ValueError,
        "threshold",
    ),
    "pair_agreement threshold='10%'": (lambda: codesign.pair_agreement([], threshold="10%"), TypeError, "threshold"),
    "pair_agreement results=dict": (lambda: codesign.pair_agreement([{"ms": 1.0}]), TypeError, "results[0]"),
    "pair_agreement results=Result": (lambda: codesign.pair_agreement(_result()), TypeError, "results"),
    "format_agreement target=2": (lambda: codesign.format_agreement(_agreement(), target=2), ValueError, "target"),
    "format_agreement agreement=0.5": (lambda: codesign.format_agreement(0.5), TypeError, "agreement"),
    "format_agreement agreement={}": (lambda: codesign.format_agreement({}), TypeError, "agreement"),
    # figures
    "plot_tiles m=0": (lambda: codesign.plot_tiles(0, 300), ValueError, "m"),
    "plot_tiles n=2.5": (lambda: codesign.plot_tiles(200, 2.5), TypeError, "n"),
    "plot_tiles tile=(128,0)": (lambda: codesign.plot_tiles(200, 300, (128, 0)), ValueError, "tile[1]"),
    "plot_tiles gpu": (lambda: codesign.plot_tiles(200, 300, gpu="H1000"), ValueError, "gpu"),
    "plot_prediction metric": (
        lambda: codesign.plot_prediction([1], [codesign.gemm_time(8, 8, 8)], metric="speed"),
        ValueError,
        "metric",
    ),
    "plot_prediction lengths": (
        lambda: codesign.plot_prediction([1, 2], [codesign.gemm_time(8, 8, 8)]),
        ValueError,
        "xs",
    ),
    "plot_prediction predictions=[1.0]": (lambda: codesign.plot_prediction([1], [1.0]), TypeError, "predictions[0]"),
    "plot_prediction xs=5": (lambda: codesign.plot_prediction(5, [codesign.gemm_time(8, 8, 8)]), TypeError, "xs"),
    "plot_wave_staircase ns=[]": (lambda: codesign.plot_wave_staircase(64, 64, []), ValueError, "ns"),
    "plot_wave_staircase ns=[0]": (lambda: codesign.plot_wave_staircase(64, 64, [0]), ValueError, "ns[0]"),
    "plot_wave_staircase m=-1": (lambda: codesign.plot_wave_staircase(-1, 64, [64]), ValueError, "m"),
    "plot_wave_staircase metric": (
        lambda: codesign.plot_wave_staircase(64, 64, [64], metric="gbps"),
        ValueError,
        "metric",
    ),
    "plot_sweep metric": (lambda: codesign.plot_sweep([_result()], "K", metric="gbps"), ValueError, "metric"),
    "plot_sweep sweep": (lambda: codesign.plot_sweep([_result()], "Q"), ValueError, "sweep"),
    "plot_sweep results=[None]": (lambda: codesign.plot_sweep([None], "K"), TypeError, "results[0]"),
    "plot_benchmark results=3": (lambda: codesign.plot_benchmark(3), TypeError, "results"),
    "benchmark progress='bar'": (lambda: codesign.benchmark(progress="bar"), TypeError, "progress"),
}


def _params():
    """The table as pytest params; the interpreter's dtype cases run only there (a GPU with bf16 accepts them)."""
    interpreter_only = pytest.mark.skipif(not runtime.INTERPRET, reason="bf16 is refused only in the interpreter")
    return [
        pytest.param(*case, id=name, marks=[interpreter_only] if "(interpreter)" in name else [])
        for name, case in CASES.items()
    ]


@pytest.mark.parametrize(("call", "error", "name"), _params())
def test_bad_input_is_refused_naming_the_argument(call, error, name):
    with pytest.raises(error) as info:
        call()
    assert _names(str(info.value), name), f"the message does not name {name!r}: {info.value}"


def test_integers_are_refused_as_floats_everywhere():
    """5.0 is not an integer anywhere in lesson 2 (the error says which integer to use instead)."""
    with pytest.raises(TypeError, match="use 64"):
        codesign.gemm_time(64.0, 64, 64)
    with pytest.raises(TypeError, match="use 64"):
        codesign.heads_options(768, 12, multiple=64.0)
    with pytest.raises(TypeError, match="use 8"):
        codesign.sweep_k(ks=[8], m=8.0, n=8)
