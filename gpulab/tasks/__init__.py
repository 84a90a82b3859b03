"""Lesson 8 (capstone): state tracking, LSTM vs Transformer, trained with the course's own kernels.

- :mod:`.data`: the tasks, generated on the fly and seeded (parity, running sum mod 5, composition in S_5);
- :mod:`.models`: a multi-head LSTM on :class:`gpulab.rnn.LSTM` and a causal Transformer with RoPE on
  :mod:`gpulab.attention`;
- :mod:`.training`: a standard AdamW loop, the evaluation (accuracy of the final state vs string length) and the
  training throughput;
- :mod:`.experiments`: the H100 run, ``python -m gpulab bench 08`` (lesson 06's benchmark, named in the syllabus);
- :mod:`.results`: its records read back as tables, a summary against the FlashRNN article, and figures;
- :mod:`.search`: the symmetric search (one grid of learning rates x warmup and one step budget for both models,
  picked by validation at the training length, then several seeds), ``python -m gpulab bench 08 search``;
- :mod:`.spread`: its records read back: the pick, the grid, the median and range over seeds, the plot;
- :mod:`.corpus`: a real text corpus (Python 3.11's documentation sources from a pinned Debian package), split by
  file, memory-mapped; :mod:`.lm`: the three models as byte-level language models, trained to a token budget;
  :mod:`.lm_bench`: ``python -m gpulab bench 08 lm-search`` and ``... lm``; :mod:`.lm_results`: tables, figure.
"""

from gpulab.tasks.data import (
    TASKS,
    Task,
    composition_table,
    get_task,
    modular_sum,
    parity,
    parity_labels,
    permutation_composition,
    permutations,
)
from gpulab.tasks.experiments import SIZES, benchmark, compare, make_model, throughput
from gpulab.tasks.models import (
    ATTENTION,
    CausalSelfAttention,
    FloorModel,
    LSTMModel,
    ProjectionsOnly,
    TorchLSTMModel,
    TransformerModel,
    count_parameters,
    default_attention,
    default_rnn_backend,
    rope,
)
from gpulab.tasks.results import (
    accuracy_records,
    accuracy_table,
    figure,
    plot_accuracy,
    plot_throughput,
    stored_rope,
    stored_throughput,
    throughput_bound,
    throughput_floors,
    throughput_records,
    throughput_summary,
    throughput_table,
)
from gpulab.tasks.training import TrainLog, accuracy_vs_length, evaluate, model_device, train, train_step_throughput

__all__ = [
    "Task",
    "TASKS",
    "get_task",
    "parity",
    "parity_labels",
    "modular_sum",
    "permutation_composition",
    "permutations",
    "composition_table",
    "ATTENTION",
    "default_attention",
    "default_rnn_backend",
    "rope",
    "CausalSelfAttention",
    "TransformerModel",
    "LSTMModel",
    "TorchLSTMModel",
    "ProjectionsOnly",
    "FloorModel",
    "count_parameters",
    "TrainLog",
    "model_device",
    "train",
    "evaluate",
    "accuracy_vs_length",
    "train_step_throughput",
    "stored_throughput",
    "stored_rope",
    "SIZES",
    "make_model",
    "accuracy_records",
    "throughput_records",
    "throughput_floors",
    "throughput_bound",
    "figure",
    "compare",
    "throughput",
    "benchmark",
    "accuracy_table",
    "throughput_table",
    "throughput_summary",
    "plot_accuracy",
    "plot_throughput",
]
