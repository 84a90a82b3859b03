"""Lesson 1's kernels (gpulab.roofline.kernels) in Triton's interpreter: the FP32 FMA chains against float64 step
by step and in closed form, the L2 sweep against lesson 0's reference; full sizes with `pytest -m gpu`."""

import pytest
import torch

from gpulab import check, hardware, memory, roofline


@pytest.mark.parametrize(("n", "block"), [(1, 16), (17, 16), (64, 64), (131, 64), (200, 128)])
@pytest.mark.parametrize("iters", [1, 3])
def test_fma_chain_matches_float64(n, block, iters):
    x = check.random_tensor(roofline.FMA_CHAINS, n, distribution="uniform", scale=2.0)
    out = roofline.fma_chain(x, iters, block=block)
    assert out.shape == (n,) and not torch.isnan(out).any()  # poisoned before the launch: every lane stored
    steps = iters * roofline.FMA_UNROLL
    check.assert_close(out, roofline.fma_reference(x, steps), name="fma_chain", context=f"n={n}, {steps} steps")


def test_fma_chain_other_constants():
    x = check.random_tensor(roofline.FMA_CHAINS, 33)
    out = roofline.fma_chain(x, 2, b=-0.5, c=1.25, block=16)
    check.assert_close(out, roofline.fma_reference(x, 2 * roofline.FMA_UNROLL, b=-0.5, c=1.25))


def test_fma_reference_by_hand_and_closed_form():
    x = torch.tensor([[2.0], [0.0], [1.0], [-2.0]])
    # one step of a*0.75 + 0.25 on each chain: 1.75, 0.25, 1.0, -1.25 -> sum 1.75
    assert roofline.fma_reference(x, 1).tolist() == [1.75]
    x = check.random_tensor(roofline.FMA_CHAINS, 9)
    for steps in (0, 1, 5, 40):
        ref = roofline.fma_reference(x, steps, b=0.9, c=0.3)
        assert torch.allclose(roofline.fma_closed_form(x, steps, b=0.9, c=0.3), ref, rtol=1e-12, atol=1e-12)
    # long chains converge to the fixed point c / (1 - b) on every chain
    assert roofline.fma_closed_form(x, 10_000).tolist() == pytest.approx([4.0] * 9)


@pytest.mark.parametrize(("n", "block", "programs"), [(1, 4096, 3), (4097, 4096, 3), (17, 16, 3), (1000, 64, 4)])
def test_l2_sweep_matches_reference_and_lesson_0(n, block, programs):
    x = memory.sweep_data(n + 50)
    x[n:] = 1e6  # past the working set: must never be read
    plan = memory.sweep_plan(n, 3 * n * 4, block, programs)
    out = roofline.l2_sweep(x, n, plan["programs"], plan["iters"], block)
    assert out.shape == (plan["programs"],) and not torch.isnan(out).any()
    ref = memory.sweep_reference(x, n, plan["programs"], plan["iters"], block)
    check.assert_close(out, ref, name="l2_sweep")
    # the same schedule as lesson 0's kernel: only the cache modifier differs
    check.assert_close(out, memory.working_set_sweep(x, n, plan["programs"], plan["iters"], block), rtol=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# GPU self-test (`pytest -m gpu` on the H100; skipped without CUDA)


@pytest.mark.gpu
def test_fma_kernel_full_size():
    n = hardware.spec().sm_count * 4 * 1024 + 17  # a full wave plus a ragged block
    x = check.random_tensor(roofline.FMA_CHAINS, n, distribution="uniform", scale=2.0)
    for iters in (1, 5):
        out = roofline.fma_chain(x, iters)
        check.assert_close(out, roofline.fma_reference(x, iters * roofline.FMA_UNROLL), name="fma_chain")
    out = roofline.fma_chain(x, 4096)  # a long chain: compare with the closed form
    check.assert_close(out, roofline.fma_closed_form(x, 4096 * roofline.FMA_UNROLL), name="fma_chain (long)")


@pytest.mark.gpu
@pytest.mark.parametrize("working_set", [(1 << 20) + 4 * 17, 8 << 20])
def test_l2_sweep_full_size(working_set):
    n = working_set // 4
    x = memory.sweep_data(n)
    plan = memory.sweep_plan(n, 4 * working_set, 4096, 4 * hardware.spec().sm_count)
    out = roofline.l2_sweep(x, n, plan["programs"], plan["iters"], 4096)
    check.assert_close(out, memory.sweep_reference(x, n, plan["programs"], plan["iters"], 4096), rtol=1e-4)


def test_kernel_outputs_come_from_the_one_poison_policy(monkeypatch):
    """fma_chain and l2_sweep allocate through check.new_output: NaN-filled here (tests), plain empty when timed."""
    made = []
    real = check.new_output

    def spy(*shape, **kw):
        made.append(shape)
        return real(*shape, **kw)

    monkeypatch.setattr(check, "new_output", spy)
    roofline.fma_chain(check.random_tensor(roofline.FMA_CHAINS, 5), 1, block=16)
    x = memory.sweep_data(64)
    roofline.l2_sweep(x, 64, 3, 1, 16)
    assert made == [(5,), (3,)]
