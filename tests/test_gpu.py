"""GPU self-test: every kernel at full size, in one call (`pytest -m gpu` on the H100). Skipped without CUDA."""

import math

import pytest
import torch

from gpulab import bench, check, hardware, memory, runtime

pytestmark = pytest.mark.gpu


def test_runtime_is_cuda():
    assert runtime.MODE == "cuda" and runtime.device.type == "cuda"
    assert not runtime.INTERPRET


def test_live_spec_matches_device():
    s = hardware.spec()
    p = hardware.live_properties()
    assert s.sm_count == p["sm_count"] > 0
    assert s.l2_bytes > 0


@pytest.mark.parametrize("n", [1, 17, 4097, (1 << 28) + 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_copy_full_size(n, dtype):
    src = check.random_tensor(n, dtype=dtype)
    out = check.poisoned(n, dtype=dtype)
    check.assert_close(memory.copy(src, out), src.double(), dtype=dtype, rtol=0.0)


@pytest.mark.parametrize("working_set", [16 << 10, (1 << 20) + 4 * 17, 64 << 20, 1 << 30])
def test_sweep_full_size(working_set):
    n = working_set // 4
    x = memory.sweep_data(n)
    plan = memory.sweep_plan(n, 2 * working_set, 4096, 4 * hardware.spec().sm_count)
    out = memory.working_set_sweep(x, n, plan["programs"], plan["iters"], 4096)
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], 4096)
    check.assert_close(out, ref, rtol=1e-4)


def test_timing_and_resources():
    x = check.random_tensor(1 << 24)
    y = torch.empty_like(x)
    r = bench.measure(
        lambda: memory.copy(x, y), lesson="00", case="copy", bytes=2 * x.numel() * 4, kernel=memory.copy_kernel
    )
    assert r.mode == "cuda" and r.ms > 0 and math.isfinite(r.gbps)
    assert r.ms_q25 <= r.ms <= r.ms_q75
    assert r.registers is not None and r.registers > 0 and r.spills == 0
    assert r.sm_count == torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(("m", "n", "k"), [(1536, 4096, 4096), (1000, 1017, 333), (1, 17, 4095)])
def test_fixed_tile_matmul_full_size(m, n, k, dtype):
    from gpulab import codesign

    a = check.random_tensor(m, k, dtype=dtype)
    b = check.random_tensor(k, n, dtype=dtype)
    out = check.poisoned(m, n, dtype=dtype)
    codesign.matmul_fixed_tile(a, b, out, **codesign.TRITON_GPU_CONFIG)
    ref = a.double() @ b.double()
    check.assert_close(out, ref, dtype=dtype)


def test_wrapper_overhead_is_small():
    """Kernel wrappers consult the device description on every call: it must be cached, not asked of the driver."""
    import time

    hardware.spec()
    t0 = time.perf_counter()
    for _ in range(1000):
        hardware.require_dtype("x", torch.bfloat16)
    assert (time.perf_counter() - t0) / 1000 < 50e-6
