"""Lesson 3: the cuDNN 5 LSTM optimization ladder (Appleyard, 2016), rebuilt one measured step at a time.

- :mod:`.steps`: the numbered steps, each ``step_n(x, weights, state=None) -> (y, (h_n, c_n))`` like ``nn.LSTM``,
  and the float64 reference :func:`lstm_reference`;
- :mod:`.benchmark`: the problem, the check-then-time loop over every step, eager and graphed, beside cuDNN, the
  table and the targets; :mod:`.plot`: its figures.

CUDA graphs (:func:`capture`, :class:`CapturedStep`) and :func:`no_tf32` live in :mod:`gpulab.bench`; they are part
of the lesson and shown here too. Weights come from :func:`gpulab.rnn.from_torch_lstm`.
"""

from __future__ import annotations

from gpulab.bench import CapturedStep, capture, no_tf32
from gpulab.rnn.ladder import plot, steps
from gpulab.rnn.ladder.benchmark import (
    ARTICLE,
    ARTICLE_M40,
    SAME_MODE_CLOCKS,
    benchmark,
    check_outputs,
    ladder_table,
    make_problem,
    math_floor_ms,
    mode_ms,
    problem,
    same_mode,
    same_mode_summary,
    slower_graphed,
    targets,
)
from gpulab.rnn.ladder.plot import plot_ladder, plot_roofline
from gpulab.rnn.ladder.steps import (
    BEYOND_ARTICLE,
    STEPS,
    lstm_cell_torch,
    lstm_reference,
    run_step,
    step0_baseline,
    step1_combined_gemm,
    step2_streams,
    step3_fused_pointwise,
    step4_pretransposed,
    step5_combined_input_gemm,
    step6_wavefront,
    step7_wavefront_concat,
    step8_wavefront_two_streams,
)
from gpulab.rnn.weights import LSTMWeights, from_torch_lstm

__all__ = [
    "STEPS",
    "BEYOND_ARTICLE",
    "step0_baseline",
    "step1_combined_gemm",
    "step2_streams",
    "step3_fused_pointwise",
    "step4_pretransposed",
    "step5_combined_input_gemm",
    "step6_wavefront",
    "step7_wavefront_concat",
    "step8_wavefront_two_streams",
    "run_step",
    "lstm_reference",
    "lstm_cell_torch",
    "capture",
    "CapturedStep",
    "no_tf32",
    "ARTICLE",
    "ARTICLE_M40",
    "problem",
    "make_problem",
    "check_outputs",
    "ladder_table",
    "targets",
    "same_mode",
    "SAME_MODE_CLOCKS",
    "mode_ms",
    "same_mode_summary",
    "slower_graphed",
    "math_floor_ms",
    "plot_ladder",
    "plot_roofline",
    "benchmark",
    "LSTMWeights",
    "from_torch_lstm",
    "steps",
    "plot",
]

_check = check_outputs  # the name notebook 03 calls
