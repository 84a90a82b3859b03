"""gpulab.hardware: the spec table, name lookup, cache levels, ridge points."""

import pytest
import torch

from gpulab import hardware
from gpulab.hardware import KB, MB, SPECS

H100 = "NVIDIA H100 SXM5 80GB"
H100_PCIE = "NVIDIA H100 PCIe 80GB"
A100 = "NVIDIA A100 SXM4 80GB"
V100 = "NVIDIA V100 SXM2 32GB"
RTX4090 = "NVIDIA GeForce RTX 4090"
RTX3090TI = "NVIDIA GeForce RTX 3090 Ti"
L4 = "NVIDIA L4"
P100 = "NVIDIA Tesla P100 SXM2 16GB"
T4 = "NVIDIA Tesla T4"

# Every GPU the course names, by the short name used in the text.
COURSE_GPUS = {
    "H100": H100,
    "A100": A100,
    "V100": V100,
    "RTX 4090": RTX4090,
    "RTX 3090 Ti": RTX3090TI,
    "L4": L4,
    "P100": P100,
    "T4": T4,
}


@pytest.mark.parametrize(("alias", "full"), COURSE_GPUS.items())
def test_course_gpus_are_in_the_table_and_resolvable(alias, full):
    assert full in SPECS
    assert SPECS[full].name == full
    assert hardware.spec(full) is SPECS[full]
    assert hardware.spec(alias) is SPECS[full]
    assert hardware.spec(alias.lower()) is SPECS[full]
    assert hardware.spec(alias.upper()) is SPECS[full]


@pytest.mark.parametrize(
    ("driver_name", "full"),
    [
        ("NVIDIA H100 80GB HBM3", H100),
        ("NVIDIA H100 PCIe", H100_PCIE),
        ("NVIDIA H100 SXM5 80GB", H100),
        ("NVIDIA A100-SXM4-40GB", A100),
        ("NVIDIA A100-SXM4-80GB", A100),
        ("NVIDIA A100 80GB PCIe", A100),
        ("Tesla V100-SXM2-32GB", V100),
        ("Tesla V100-PCIE-16GB", V100),
        ("NVIDIA GeForce RTX 4090", RTX4090),
        ("NVIDIA GeForce RTX 3090 Ti", RTX3090TI),
        ("NVIDIA L4", L4),
        ("Tesla P100-PCIE-16GB", P100),
        ("Tesla P100-SXM2-16GB", P100),
        ("Tesla T4", T4),
        ("NVIDIA H200", "NVIDIA H200 SXM 141GB"),
    ],
)
def test_driver_names_resolve(driver_name, full):
    assert hardware.spec(driver_name).name == full


@pytest.mark.parametrize(
    "lookalike",
    ["NVIDIA GeForce RTX 3090", "NVIDIA L40S", "NVIDIA A10", "NVIDIA A40", "NVIDIA T400", "Tesla K80"],
)
def test_lookalike_names_are_not_confused(lookalike):
    """A 3090 is not a 3090 Ti, an L40S not an L4, an A10 not an A100: unknown, not a wrong spec."""
    with pytest.raises(ValueError):
        hardware.spec(lookalike)


def test_pcie_and_sxm_h100_differ():
    sxm, pcie = hardware.spec("NVIDIA H100 80GB HBM3"), hardware.spec("NVIDIA H100 PCIe")
    assert sxm is not pcie
    assert sxm.hbm_gbps > pcie.hbm_gbps
    assert sxm.sm_count == 132 and pcie.sm_count == 114


@pytest.mark.parametrize("s", SPECS.values(), ids=lambda s: s.name)
def test_spec_values_are_sane(s):
    assert s.sm_count > 0
    assert s.hbm_gbps > 0 and s.memory_gb > 0
    assert s.l2_bytes >= 1 * MB
    assert 0 < s.smem_per_block <= s.smem_per_sm
    assert s.l1_per_sm > 0
    assert s.l1_per_sm < s.l2_bytes
    assert s.fp32_tflops > 0
    assert s.registers_per_sm == 65536 and s.max_registers_per_thread == 255
    assert (6, 0) <= s.compute_capability <= (9, 0)
    for key, rate in s.tensor_tflops.items():
        assert rate >= s.fp32_tflops, key  # tensor cores are never slower than the FP32 pipe
    # bf16 (and tf32) tensor cores only from compute capability 8.0 (Ampere) on
    assert s.has_bf16 == (s.compute_capability >= (8, 0))
    assert ("bfloat16" in s.tensor_tflops) == s.has_bf16
    assert s.has_tf32 == ("tf32" in s.tensor_tflops) == s.has_bf16
    if "float16" in s.tensor_tflops and "bfloat16" in s.tensor_tflops:
        assert s.tensor_tflops["float16"] == s.tensor_tflops["bfloat16"]


def test_specific_values():
    t4 = hardware.spec("T4")
    assert t4.smem_per_sm == 64 * KB and t4.smem_per_block == 64 * KB
    assert not t4.has_bf16 and not t4.has_tf32
    assert t4.compute_capability == (7, 5)
    v100 = hardware.spec("V100")
    assert not v100.has_bf16 and v100.compute_capability == (7, 0)
    h100 = hardware.spec("H100")
    assert h100.has_bf16 and h100.smem_per_sm == 228 * KB and h100.l2_bytes == 50 * MB
    a100 = hardware.spec("A100")
    assert a100.has_bf16 and a100.compute_capability == (8, 0)
    assert hardware.spec("P100").tensor_tflops == {}


def test_spec_none_on_cpu_is_the_h100():
    assert hardware.spec() is SPECS[H100]
    assert hardware.spec(None).name == H100


def test_spec_passes_a_gpuspec_through():
    s = SPECS[T4]
    assert hardware.spec(s) is s


@pytest.mark.parametrize("name", ["H1000", "B200", "", "Radeon MI300X", "NVIDIA"])
def test_unknown_names_list_known_ones(name):
    with pytest.raises(ValueError) as e:
        hardware.spec(name)
    msg = str(e.value)
    assert repr(name) in msg
    assert "known" in msg
    for alias in ("h100", "a100", "t4", "rtx 4090"):
        assert alias in msg


@pytest.mark.parametrize("bad", [100, 3.5, ["H100"], b"H100", ("H100",)])
def test_non_string_names_raise_type_error(bad):
    with pytest.raises(TypeError) as e:
        hardware.spec(bad)
    assert type(bad).__name__ in str(e.value)


# ----------------------------------------------------------------------------------------------------------------
# peak rates and ridge points


def test_peak_tflops():
    h = hardware.spec("H100")
    assert h.peak_tflops(torch.float16) == 989.4
    assert h.peak_tflops("bfloat16") == 989.4
    assert h.peak_tflops(torch.float32) == 66.9
    assert h.peak_tflops(torch.float32, allow_tf32=True) == 494.7
    assert h.peak_tflops(torch.float16, tensor_cores=False) == pytest.approx(2 * 66.9)
    t4 = hardware.spec("T4")
    assert t4.peak_tflops(torch.float32, allow_tf32=True) == 8.1  # no TF32 on Turing
    assert t4.peak_tflops(torch.float16) == 65.0
    assert hardware.spec("P100").peak_tflops(torch.float16) == pytest.approx(2 * 10.6)  # packed fp16, no tensor cores


@pytest.mark.parametrize("gpu", ["H100", "A100", "T4", "L4", "P100"])
@pytest.mark.parametrize("dtype", ["float16", torch.float16, "float32", torch.bfloat16])
def test_ridge_point_is_peak_over_bandwidth(gpu, dtype):
    s = hardware.spec(gpu)
    expected = s.peak_tflops(dtype) * 1e12 / (s.hbm_gbps * 1e9)
    assert hardware.ridge_point(gpu, dtype) == pytest.approx(expected)
    assert hardware.ridge_point(s, dtype) == pytest.approx(expected)


def test_ridge_point_values():
    assert hardware.ridge_point("H100") == pytest.approx(989.4e12 / 3350e9)
    assert hardware.ridge_point() == pytest.approx(989.4e12 / 3350e9)  # default: the reference GPU, fp16
    assert hardware.ridge_point("T4", "float32") == pytest.approx(8.1e12 / 320e9)
    assert hardware.ridge_point("A100", torch.float32) == pytest.approx(19.5e12 / 2039e9)


@pytest.mark.parametrize(
    ("name", "dtype", "allow_tf32"),
    [("fp16", torch.float16, False), ("bf16", torch.bfloat16, False), ("fp32", torch.float32, True)],
)
def test_peak_tflops_accepts_short_dtype_names(name, dtype, allow_tf32):
    h = hardware.spec("H100")
    assert h.peak_tflops(name, allow_tf32=allow_tf32) == h.peak_tflops(dtype, allow_tf32=allow_tf32)
    assert hardware.ridge_point("H100", name) == pytest.approx(hardware.ridge_point("H100", dtype))


# ----------------------------------------------------------------------------------------------------------------
# cache levels


@pytest.mark.parametrize("gpu", ["H100", "A100", "V100", "T4", "RTX 4090", "P100"])
def test_cache_level_boundaries(gpu):
    s = hardware.spec(gpu)
    assert hardware.cache_level(0, gpu) == "L1"
    assert hardware.cache_level(1, gpu) == "L1"
    assert hardware.cache_level(s.l1_per_sm, gpu) == "L1"
    assert hardware.cache_level(s.l1_per_sm + 1, gpu) == "L2"
    assert hardware.cache_level(s.l2_bytes, gpu) == "L2"
    assert hardware.cache_level(s.l2_bytes + 1, gpu) == "HBM"
    assert hardware.cache_level(4 << 30, s) == "HBM"


def test_cache_level_default_gpu_is_the_h100():
    assert hardware.cache_level(256 * KB) == "L1"
    assert hardware.cache_level(256 * KB + 1) == "L2"
    assert hardware.cache_level(50 * MB + 1) == "HBM"


def test_cache_level_depends_on_the_gpu():
    # 1 MB: in L2 everywhere; 8 MB: in the H100's L2 but past a V100's 6 MB
    assert hardware.cache_level(8 * MB, "H100") == "L2"
    assert hardware.cache_level(8 * MB, "V100") == "HBM"
    assert hardware.cache_level(100 * KB, "T4") == "L2"  # T4's L1 is 96 KB
    assert hardware.cache_level(100 * KB, "H100") == "L1"


@pytest.mark.parametrize("w", [-1, -(1 << 20)])
def test_cache_level_rejects_negative(w):
    with pytest.raises(ValueError) as e:
        hardware.cache_level(w, "H100")
    assert "working_set_bytes" in str(e.value) and str(w) in str(e.value)


# ----------------------------------------------------------------------------------------------------------------
# names, tables, live properties


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
        ("Tesla T4", "tesla-t4"),
        ("CPU (Triton interpreter)", "cpu-triton-interpreter"),
        ("  NVIDIA  L4  ", "nvidia-l4"),
        ("", "unknown"),
        ("()", "unknown"),
    ],
)
def test_gpu_slug(name, slug):
    assert hardware.gpu_slug(name) == slug


def test_spec_slug_property():
    assert SPECS[H100].slug == "nvidia-h100-sxm5-80gb"
    assert "h100" in SPECS[H100].slug


def test_spec_table_lists_every_gpu():
    text = hardware.spec_table()
    lines = text.splitlines()
    assert len(lines) == 2 + len(SPECS)  # header, rule, one row per GPU
    assert "GPU" in lines[0] and "bf16" in lines[0] and "ridge" in lines[0]
    assert set(lines[1]) == {"-"}
    for name, s in SPECS.items():
        row = next(line for line in lines[2:] if line.startswith(name))
        assert row.split()[-2] == ("yes" if s.has_bf16 else "no")
        assert f"{s.sm_count:4d}" in row


def test_spec_table_of_a_subset():
    text = hardware.spec_table([SPECS[T4]])
    assert T4 in text and H100 not in text
    assert len(text.splitlines()) == 3


def test_live_properties_without_cuda():
    assert hardware.live_properties() == {}
    assert hardware.live_properties(0) == {}


HARDWARE_BAD = [
    ("spec list", lambda: hardware.spec(["H100"]), TypeError, "gpu must be"),
    ("spec unknown", lambda: hardware.spec("H1000"), ValueError, "gpu='H1000'"),
    ("gpu_slug None", lambda: hardware.gpu_slug(None), TypeError, "name must be a device name"),
    ("cache_level float", lambda: hardware.cache_level(1024.5), TypeError, "working_set_bytes"),
    ("cache_level negative", lambda: hardware.cache_level(-1), ValueError, "working_set_bytes"),
    ("cache_level gpu", lambda: hardware.cache_level(1, gpu="B9000"), ValueError, "gpu='B9000'"),
    ("live_properties index", lambda: hardware.live_properties(-1), ValueError, "index"),
    ("live_properties index float", lambda: hardware.live_properties(0.0), TypeError, "index"),
    ("peak_tflops dtype", lambda: SPECS["NVIDIA Tesla T4"].peak_tflops("fp17"), ValueError, "dtype='fp17'"),
    ("peak_tflops float64", lambda: SPECS["NVIDIA Tesla T4"].peak_tflops("float64"), ValueError, "float64"),
    ("peak_tflops float8", lambda: SPECS["NVIDIA Tesla T4"].peak_tflops("float8"), ValueError, "float8"),
    (
        "peak_tflops tensor_cores",
        lambda: SPECS["NVIDIA Tesla T4"].peak_tflops(tensor_cores="yes"),
        TypeError,
        "tensor_cores",
    ),
    ("peak_tflops allow_tf32", lambda: SPECS["NVIDIA Tesla T4"].peak_tflops(allow_tf32=0), TypeError, "allow_tf32"),
    ("spec_table items", lambda: hardware.spec_table(["H100"]), TypeError, "specs[0]"),
    ("ridge_point dtype", lambda: hardware.ridge_point("H100", "fp17"), ValueError, "dtype"),
]


@pytest.mark.parametrize(("call", "error", "words"), [b[1:] for b in HARDWARE_BAD], ids=[b[0] for b in HARDWARE_BAD])
def test_hardware_refuses_bad_input_naming_the_argument(call, error, words):
    with pytest.raises(error) as e:
        call()
    assert words in str(e.value)
