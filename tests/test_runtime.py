"""gpulab.runtime on a machine without CUDA: interpreter mode, dtype rules, tile helpers, GPULAB_DEVICE."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy
import pytest
import torch
import triton

import gpulab
from gpulab import dtypes, hardware, runtime

ROOT = Path(gpulab.__file__).resolve().parent.parent


def _python(code, **env_changes):
    """Run ``python -c code`` in a fresh interpreter with the environment changed (None removes a variable)."""
    env = os.environ.copy()
    for key, value in env_changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


# ----------------------------------------------------------------------------------------------------------------
# mode


def test_mode_is_interpreter_without_cuda():
    assert not torch.cuda.is_available()
    assert runtime.MODE == "interpreter"
    assert runtime.INTERPRET is True
    assert os.environ.get("TRITON_INTERPRET") == "1"
    assert runtime.device == torch.device("cpu")
    assert runtime.on_gpu() is False


def test_describe_reports_mode_and_versions():
    info = runtime.describe()
    assert info["mode"] == "interpreter"
    assert info["device"] == "cpu"
    assert info["cuda_available"] is False
    assert info["torch"] == torch.__version__
    assert info["triton"] == triton.__version__
    assert info["numpy"] == numpy.__version__
    assert "gpu" not in info
    assert ("problem" in info) == (runtime.INTERPRETER_PROBLEM is not None)


@pytest.mark.parametrize(
    ("triton_v", "numpy_v", "broken"),
    [("3.6.0", "2.3.0", True), ("3.6.0", "2.4.1", True), ("3.6.0", "2.2.6", False), ("3.7.0", "2.3.0", False)],
)
def test_interpreter_problem_names_the_numpy_fix(monkeypatch, triton_v, numpy_v, broken):
    monkeypatch.setattr(triton, "__version__", triton_v)
    monkeypatch.setattr(numpy, "__version__", numpy_v)
    problem = runtime._interpreter_problem()
    if broken:
        assert problem is not None
        assert numpy_v in problem and triton_v in problem
        assert "numpy<2.3" in problem
    else:
        assert problem is None


def test_pick_chooses_cpu_value_here_and_gpu_value_on_a_gpu(monkeypatch):
    assert runtime.pick(cpu=1024, gpu=1 << 26) == 1024
    assert runtime.pick(cpu="small", gpu="big") == "small"
    monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    assert runtime.pick(cpu=1024, gpu=1 << 26) == 1 << 26


def test_stream_and_make_stream_are_noops_on_cpu():
    s = runtime.make_stream()
    assert s is None
    x = torch.arange(5.0)
    with runtime.stream(s) as got:
        assert got is None
        y = x * 2
    assert torch.equal(y, torch.arange(0.0, 10.0, 2.0))
    sentinel = object()  # on a GPU this would be a torch.cuda.Stream; on CPU it must not reach torch.cuda
    with runtime.stream(sentinel) as got:
        assert got is sentinel
    assert runtime.synchronize() is None


# ----------------------------------------------------------------------------------------------------------------
# GPULAB_DEVICE and TRITON_INTERPRET, decided at import


@pytest.mark.parametrize("value", ["cpu", " CPU ", ""])
def test_decide_accepts_cpu_and_unset(monkeypatch, value):
    monkeypatch.setenv("GPULAB_DEVICE", value)
    assert runtime._decide() == "interpreter"


@pytest.mark.parametrize("value", ["bogus", "nvidia", "cuda:0", "tpu"])
def test_decide_rejects_unknown_device_in_process(monkeypatch, value):
    monkeypatch.setenv("GPULAB_DEVICE", value)
    with pytest.raises(ValueError, match="GPULAB_DEVICE") as e:
        runtime._decide()
    assert repr(value.strip().lower()) in str(e.value)
    assert "'cpu'" in str(e.value) and "'cuda'" in str(e.value)


def test_decide_with_a_fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("GPULAB_DEVICE", raising=False)
    assert runtime._decide() == "cuda"
    monkeypatch.setenv("GPULAB_DEVICE", "cpu")
    assert runtime._decide() == "interpreter"
    monkeypatch.delenv("GPULAB_DEVICE")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the user's explicit choice is respected
    assert runtime._decide() == "interpreter"


def test_gpulab_device_bogus_fails_import():
    proc = _python("import gpulab", GPULAB_DEVICE="bogus")
    assert proc.returncode != 0
    assert "ValueError" in proc.stderr
    assert "GPULAB_DEVICE='bogus' is not supported" in proc.stderr
    assert "'cpu'" in proc.stderr and "'cuda'" in proc.stderr


def test_gpulab_device_cuda_fails_without_cuda():
    proc = _python("import gpulab", GPULAB_DEVICE="cuda")
    assert proc.returncode != 0
    assert "RuntimeError" in proc.stderr
    assert "GPULAB_DEVICE=cuda" in proc.stderr
    assert "no CUDA device" in proc.stderr


def test_import_without_triton_interpret_sets_it():
    code = "import os, gpulab; print(gpulab.runtime.MODE, os.environ.get('TRITON_INTERPRET'))"
    proc = _python(code, GPULAB_DEVICE=None, TRITON_INTERPRET=None)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["interpreter", "1"]


# ----------------------------------------------------------------------------------------------------------------
# dtypes


def test_supported_dtypes():
    assert hardware.supported_dtypes() == (torch.float32, torch.float16)
    assert torch.bfloat16 in hardware.supported_dtypes("H100")
    assert torch.bfloat16 in hardware.supported_dtypes("A100")
    assert torch.bfloat16 not in hardware.supported_dtypes("T4")
    assert torch.bfloat16 not in hardware.supported_dtypes("V100")


def test_default_dtype():
    assert hardware.default_dtype() is torch.float32  # the interpreter computes in fp32
    assert hardware.default_dtype("H100") is torch.bfloat16
    assert hardware.default_dtype("A100") is torch.bfloat16
    assert hardware.default_dtype("T4") is torch.float16
    assert hardware.default_dtype("V100") is torch.float16
    for gpu in ("H100", "T4", "P100"):
        assert hardware.require_dtype("x", hardware.default_dtype(gpu), gpu=gpu) is hardware.default_dtype(gpu)


@pytest.mark.parametrize("dtype", [torch.bfloat16, "bf16", "bfloat16", "BF16"])
def test_require_dtype_refuses_bf16_on_cpu(dtype):
    with pytest.raises(ValueError) as e:
        hardware.require_dtype("q", dtype)
    msg = str(e.value)
    assert msg.startswith("q ")  # names the argument
    assert "bfloat16" in msg and "interpreter" in msg
    assert "float32" in msg and "float16" in msg  # what to use instead
    assert ".float()" in msg  # and how


def test_require_dtype_bf16_fix_uses_the_argument_name():
    with pytest.raises(ValueError) as e:
        hardware.require_dtype("q", torch.bfloat16)
    assert "q.float()" in str(e.value)


@pytest.mark.parametrize("gpu", ["T4", "V100", "Tesla T4"])
def test_require_dtype_refuses_bf16_on_old_gpus(gpu):
    with pytest.raises(ValueError) as e:
        hardware.require_dtype("weights", torch.bfloat16, gpu=gpu)
    msg = str(e.value)
    assert msg.startswith("weights ")
    assert gpu in msg
    assert "float32" in msg and "float16" in msg


@pytest.mark.parametrize("gpu", ["H100", "A100", "L4", "RTX 4090"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, "bf16"])
def test_require_dtype_accepts_bf16_on_ampere_and_newer(gpu, dtype):
    assert hardware.require_dtype("x", dtype, gpu=gpu) is torch.bfloat16


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("fp16", torch.float16),
        ("float16", torch.float16),
        ("half", torch.float16),
        ("FP16", torch.float16),
        ("fp32", torch.float32),
        ("float32", torch.float32),
        (torch.float16, torch.float16),
        (torch.float32, torch.float32),
    ],
)
def test_require_dtype_accepts_names(name, expected):
    assert hardware.require_dtype("x", name) is expected


@pytest.mark.parametrize("bad", ["int8", "float8", "fp17", "", None, 3, torch.int32])
def test_require_dtype_rejects_unknown(bad):
    with pytest.raises(ValueError) as e:
        hardware.require_dtype("scores", bad)
    assert "scores" in str(e.value)


def test_require_dtype_allowed_narrows_the_choice():
    with pytest.raises(ValueError) as e:
        hardware.require_dtype("acc", torch.float16, allowed=(torch.float32,))
    assert "acc" in str(e.value) and "float32" in str(e.value)
    assert hardware.require_dtype("acc", "fp32", allowed=(torch.float32,)) is torch.float32
    with pytest.raises(ValueError, match="acc"):
        hardware.require_dtype("acc", torch.float64)  # not among the default kernel dtypes


# ----------------------------------------------------------------------------------------------------------------
# dot helpers


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("allow_tf32", [False, True])
def test_dot_precision_is_ieee_on_cpu(dtype, allow_tf32):
    assert runtime.dot_precision(dtype, allow_tf32=allow_tf32) == "ieee"


def test_dot_precision_on_a_gpu(monkeypatch):
    monkeypatch.setattr(runtime, "on_gpu", lambda: True)
    assert runtime.dot_precision(torch.float32) == "ieee"
    assert runtime.dot_precision(torch.float32, allow_tf32=True) == "tf32"
    assert runtime.dot_precision(torch.float16, allow_tf32=True) == "ieee"
    assert runtime.dot_precision(torch.bfloat16, allow_tf32=True) == "ieee"


def test_dot_precision_rejects_unknown_dtype():
    with pytest.raises(TypeError, match="torch dtype"):
        runtime.dot_precision("fp32", allow_tf32=True)  # a name: pass the tensor's .dtype


@pytest.mark.parametrize(("n", "expected"), [(1, 16), (15, 16), (16, 16), (17, 32), (100, 128), (129, 256)])
def test_dot_block(n, expected):
    b = runtime.dot_block(n)
    assert b == expected
    assert b >= 16 and b >= n
    assert b & (b - 1) == 0


def test_dot_block_minimum():
    assert runtime.dot_block(1, minimum=32) == 32
    assert runtime.dot_block(100, minimum=32) == 128
    with pytest.raises(ValueError):
        runtime.dot_block(0)


@pytest.mark.parametrize(
    ("n", "expected"),
    [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (17, 32), (1023, 1024), (1024, 1024), (1025, 2048), (2**40 + 1, 2**41)],
)
def test_next_power_of_2(n, expected):
    assert runtime.next_power_of_2(n) == expected


@pytest.mark.parametrize("n", [0, -1, -1024])
def test_next_power_of_2_rejects_non_positive(n):
    with pytest.raises(ValueError) as e:
        runtime.next_power_of_2(n)
    assert "n must be a positive integer" in str(e.value) and str(n) in str(e.value)


# ----------------------------------------------------------------------------------------------------------------
# the validation vocabulary: bad input refused, naming the argument


RUNTIME_BAD = [
    ("integer float", lambda: runtime.integer("n", 5.0), runtime.ArgumentTypeError, "n must be an integer"),
    ("integer float hint", lambda: runtime.integer("n", 5.0), TypeError, "use 5"),
    ("integer bool", lambda: runtime.integer("n", True), TypeError, "n"),
    ("integer str", lambda: runtime.integer("n", "5"), TypeError, "n"),
    ("integer below", lambda: runtime.integer("n", 2, minimum=3), ValueError, "n must be an integer >= 3, got 2"),
    ("integer above", lambda: runtime.integer("n", 9, maximum=8), ValueError, "n must be an integer <= 8"),
    ("positive_int 0", lambda: runtime.positive_int("block", 0), ValueError, "block must be a positive integer"),
    ("nonnegative_int -1", lambda: runtime.nonnegative_int("size", -1), ValueError, "size must be a non-negative"),
    ("as_device name", lambda: runtime.as_device("nonsense"), ValueError, "device='nonsense' is not a device"),
    ("as_device float", lambda: runtime.as_device(1.5, "where"), TypeError, "where must be a torch.device"),
    ("as_device bool", lambda: runtime.as_device(True), TypeError, "device must be a torch.device"),
    ("finite_float nan", lambda: runtime.finite_float("scale", float("nan")), ValueError, "scale must be a finite"),
    ("finite_float str", lambda: runtime.finite_float("scale", "big"), TypeError, "scale must be a real number"),
    ("finite_float bool", lambda: runtime.finite_float("scale", True), TypeError, "scale"),
    ("finite_float positive", lambda: runtime.finite_float("scale", 0.0, positive=True), ValueError, "scale must be >"),
    ("finite_float minimum", lambda: runtime.finite_float("x", -1, minimum=0), ValueError, "x must be >= 0"),
    ("finite_float maximum", lambda: runtime.finite_float("x", 2, maximum=1), ValueError, "x must be <= 1"),
    ("strict_bool 1", lambda: runtime.strict_bool("is_causal", 1), TypeError, "is_causal must be True or False"),
    ("strict_bool 'no'", lambda: runtime.strict_bool("is_causal", "no"), TypeError, "is_causal"),
    ("strict_bool None", lambda: runtime.strict_bool("is_causal", None), ValueError, "is_causal"),
    ("one_of", lambda: runtime.one_of("mode", "fast", ("eager", "graph")), ValueError, "mode='fast'"),
    ("one_of list", lambda: runtime.one_of("mode", ["eager"], ("eager",)), ValueError, "'eager'"),
    ("one_of 1.0 vs 1", lambda: runtime.one_of("k", 1.0, (1, 2)), ValueError, "k=1.0"),
    (
        "same_shape",
        lambda: runtime.same_shape("a", torch.ones(2, 1), "b", torch.ones(1, 2)),
        ValueError,
        "a has shape [2, 1] but b has shape [1, 2]",
    ),
    ("same_shape list", lambda: runtime.same_shape("a", [1.0], "b", torch.ones(1)), TypeError, "a must be a torch"),
    ("require_tensor type", lambda: runtime.require_tensor("q", [1.0]), TypeError, "q must be a torch.Tensor"),
    ("require_tensor ndim", lambda: runtime.require_tensor("q", torch.ones(2), ndim=4), ValueError, "q must be 4-dim"),
    (
        "require_tensor dtype",
        lambda: runtime.require_tensor("q", torch.ones(2), dtype=torch.float16),
        ValueError,
        "q has dtype torch.float32",
    ),
    (
        "require_tensor shape",
        lambda: runtime.require_tensor("q", torch.ones(2, 3), shape=(2, None, 1)),
        ValueError,
        "q must have shape [2, *, 1]",
    ),
    ("next_power_of_2 0", lambda: runtime.next_power_of_2(0), ValueError, "n must be a positive integer"),
    ("next_power_of_2 2.5", lambda: runtime.next_power_of_2(2.5), TypeError, "n"),
    ("dot_block minimum", lambda: runtime.dot_block(8, minimum=0), ValueError, "minimum"),
    ("poisoning 1", lambda: runtime.poisoning(1).__enter__(), TypeError, "on must be True or False"),
    ("as_dtype", lambda: dtypes.as_dtype("fp17", "dtype"), ValueError, "dtype='fp17'"),
    ("short int", lambda: dtypes.short(5), TypeError, "dtype must be a torch dtype"),
    ("short unknown", lambda: dtypes.short("fp17"), ValueError, "dtype='fp17'"),
    ("names_of unknown", lambda: dtypes.names_of(["fp17"]), ValueError, "dtype='fp17'"),
    ("dot_precision", lambda: runtime.dot_precision("int8"), TypeError, "dtype must be a torch dtype"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in RUNTIME_BAD], ids=[b[0] for b in RUNTIME_BAD])
def test_runtime_refuses_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)


def test_argument_type_error_is_both_kinds():
    assert issubclass(runtime.ArgumentTypeError, TypeError) and issubclass(runtime.ArgumentTypeError, ValueError)


def test_vocabulary_accepts_what_it_promises():
    assert runtime.integer("n", numpy.int64(3)) == 3 and type(runtime.integer("n", numpy.int64(3))) is int
    assert runtime.finite_float("x", torch.tensor(2.5)) == 2.5
    assert runtime.strict_bool("b", numpy.bool_(True)) is True
    assert runtime.one_of("mode", "eager", ["eager", "graph"]) == "eager"
    runtime.same_shape("a", torch.ones(2, 3), "b", torch.zeros(2, 3))


@pytest.mark.parametrize(
    "value, error, words",
    [
        (5.5, TypeError, "xs must be a list of int records, got float 5.5"),
        ("ab", TypeError, "xs must be a list of int records, got str"),
        ({1: 2}, TypeError, "xs must be a list"),
        (3, TypeError, "got one int; use [xs]"),
        ([], ValueError, "xs is empty; pass at least one of the int records"),
        ([1, "2"], TypeError, "xs[1] is a str '2', not a int"),
    ],
    ids=["int", "str", "dict", "one", "empty", "item"],
)
def test_record_list_refuses_what_is_not_a_non_empty_list_of_the_kind(value, error, words):
    with pytest.raises(error) as info:
        runtime.record_list("xs", value, int, source="")
    assert words in str(info.value)


def test_record_list_takes_any_iterable_and_may_allow_empty():
    assert runtime.record_list("xs", (1, 2), int) == [1, 2]
    assert runtime.record_list("xs", iter([]), int, allow_empty=True) == []
    with pytest.raises(TypeError, match=r"got one float; use \[xs\]"):
        runtime.record_list("xs", 1.5, (int, float), "numbers")


def test_one_dtype_table_names_labels_and_parses():
    assert dtypes.as_dtype("BF16") is torch.bfloat16 and dtypes.as_dtype("torch.float16") is torch.float16
    assert [dtypes.short(d) for d in (torch.bfloat16, "float16", "fp32", "tf32", "double")] == [
        "bf16", "fp16", "fp32", "tf32", "fp64"]  # fmt: skip
    assert dtypes.name("half") == "float16" and dtypes.name("tf32") == "tf32"
    assert dtypes.names_of((torch.float32, "bf16")) == "float32, bfloat16" and dtypes.names_of(()) == "nothing"
    assert all(dtypes.as_dtype(n) is d for n, d in dtypes.NAMES.items())


def test_is_finite_is_false_for_nan_inf_and_non_numbers():
    assert runtime.is_finite(0.5) and runtime.is_finite(-3) and runtime.is_finite(numpy.float32(2.0))
    for bad in (math.nan, math.inf, -math.inf, numpy.float64("nan"), "1.0", None, True, [1.0]):
        assert not runtime.is_finite(bad), bad
