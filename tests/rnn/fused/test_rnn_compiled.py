"""The fused RNN kernels as Triton compiles them for the H100, checked without a GPU.

:mod:`gpulab.rnn.fused.measure.sass` compiles a kernel for sm_90 on the CPU machine (no driver needed) and writes its
TTGIR; a regression in how the compiler lays out the kernels' products shows there before any GPU time is spent.
"""

from gpulab.rnn.fused.measure import sass


def test_backward_product_operands_keep_the_plain_register_layout(tmp_path):
    """The backward's product ``dG_all @ R_all`` must use kWidth 2 operands (pairs of 16-bit k values).

    dG is assembled with ``tl.join``; Triton 3.6 then halves the operand's kWidth to 4 unless the operand goes through
    :func:`gpulab.triton_ops.dot_operand`, and R's fragments get reordered with ~170 register moves per step
    (the loop grows from 531 to 703 SASS instructions per step and warp at DH = 64).
    """
    run = sass.run_offline(["backward", "--dump", tmp_path])
    assert run.returncode == 0, f"the SASS probe failed:\n{run.stdout}\n{run.stderr}"
    assert "backward_dh64_w4: " in run.stdout, run.stdout
    widths = sass.kwidths((tmp_path / "backward_dh64_w4.ttgir").read_text())
    assert {op for op, _ in widths} == {"0", "1"}, f"expected both tensor-core operands in the TTGIR, found {widths}"
    assert {w for _, w in widths} == {"2"}, (
        f"the backward's product operands have kWidth {sorted({w for _, w in widths})}, expected only 2: dG lost its "
        "dot_operand wrapper (or Triton changed how it picks kWidth); see gpulab.triton_ops.dot_operand"
    )
