"""Lesson 6's public callables refuse bad input with a TypeError or ValueError that names the argument.

One table: (id, call, expected exception, a word the message must contain). ``call`` takes a tiny valid model."""

import pytest
import torch

from gpulab import tasks
from gpulab.course import grading_tasks
from gpulab.tasks import experiments
from gpulab.tasks.training import learning_rate

P = "parity"


def _small(kind):
    """A tiny model of ``kind`` ("LSTM" or "Transformer") on the CPU paths, to feed bad tokens to."""
    if kind == "LSTM":
        return tasks.LSTMModel(2, 2, d_model=4, backend="vanilla")
    return tasks.TransformerModel(2, 2, d_model=4, num_heads=1, num_layers=1, attention="naive")


CASES = [
    # data
    ("get-task-list", lambda m: tasks.get_task(["parity"]), TypeError, "task"),
    ("get-task-unknown", lambda m: tasks.get_task("sorting"), ValueError, "not a known task"),
    ("parity-batch-0", lambda m: tasks.parity(0, 4), ValueError, "batch"),
    ("parity-length-negative", lambda m: tasks.parity(2, -1), ValueError, "length"),
    ("parity-batch-float", lambda m: tasks.parity(2.0, 3), TypeError, "batch"),
    ("parity-generator-int", lambda m: tasks.parity(2, 3, generator=5), TypeError, "generator"),
    ("modsum-modulus-0", lambda m: tasks.modular_sum(2, 3, modulus=0), ValueError, "modulus"),
    ("modsum-modulus-float", lambda m: tasks.modular_sum(2, 3, modulus=2.5), TypeError, "modulus"),
    ("s5-n-float", lambda m: tasks.permutation_composition(2, 3, n=5.0), TypeError, "n must"),
    ("s5-n-0", lambda m: tasks.permutation_composition(2, 3, n=0), ValueError, "n must"),
    ("permutations-float", lambda m: tasks.permutations(3.0), TypeError, "n must"),
    ("composition-table-negative", lambda m: tasks.composition_table(-1), ValueError, "n must"),
    ("parity-labels-1d", lambda m: tasks.parity_labels(torch.tensor([1, 0, 1])), ValueError, "x must"),
    ("parity-labels-list", lambda m: tasks.parity_labels([[1, 0]]), TypeError, "x must"),
    ("parity-labels-float", lambda m: tasks.parity_labels(torch.ones(2, 3)), ValueError, "x must"),
    # models
    ("rope-odd", lambda m: tasks.rope(torch.zeros(1, 1, 3, 5)), ValueError, "even head dimension"),
    ("rope-base-0", lambda m: tasks.rope(torch.zeros(1, 1, 3, 4), base=0), ValueError, "base"),
    ("rope-list", lambda m: tasks.rope([1.0]), TypeError, "x must"),
    ("transformer-rope-str", lambda m: tasks.TransformerModel(2, 2, rope_kernel="yes"), TypeError, "rope_kernel"),
    ("stored-rope-gpu-int", lambda m: tasks.stored_rope(3), TypeError, "gpu must"),
    ("attention-heads-0", lambda m: tasks.CausalSelfAttention(16, 0), ValueError, "num_heads"),
    ("attention-width-float", lambda m: tasks.CausalSelfAttention(16.0, 2), TypeError, "d_model"),
    ("attention-kind", lambda m: tasks.TransformerModel(2, 2, attention="cudnn"), ValueError, "attention='cudnn'"),
    (
        "attention-positional",
        lambda m: tasks.TransformerModel(2, 2, positional="learned"),
        ValueError,
        "positional='learned'",
    ),  # fmt: skip
    (
        "transformer-not-divisible",
        lambda m: tasks.TransformerModel(2, 2, d_model=30, num_heads=4),
        ValueError,
        "not divisible",
    ),  # fmt: skip
    ("transformer-vocab-0", lambda m: tasks.TransformerModel(0, 2), ValueError, "vocab"),
    ("transformer-layers-0", lambda m: tasks.TransformerModel(2, 2, num_layers=0), ValueError, "num_layers"),
    ("lstm-width-0", lambda m: tasks.LSTMModel(2, 2, d_model=0, backend="vanilla"), ValueError, "d_model"),
    (
        "lstm-layers-float",
        lambda m: tasks.LSTMModel(2, 2, num_layers=1.5, backend="vanilla"),
        TypeError,
        "num_layers",
    ),  # fmt: skip
    ("lstm-backend-empty", lambda m: tasks.LSTMModel(5, 3, backend=""), ValueError, "backend='' is not supported"),
    ("lstm-backend-0", lambda m: tasks.LSTMModel(5, 3, backend=0), ValueError, "backend=0 is not supported"),
    ("lstm-heads-divide", lambda m: tasks.LSTMModel(5, 3, d_model=15, num_heads=2), ValueError, "d_model=15 is not"),
    ("lstm-heads-0", lambda m: tasks.LSTMModel(5, 3, num_heads=0, backend="vanilla"), ValueError, "num_heads"),
    ("torch-lstm-width-0", lambda m: tasks.TorchLSTMModel(2, 2, d_model=0), ValueError, "d_model"),
    ("torch-lstm-layers-float", lambda m: tasks.TorchLSTMModel(2, 2, num_layers=2.0), TypeError, "num_layers"),
    ("torch-lstm-tokens-1d", lambda m: tasks.TorchLSTMModel(2, 2)(torch.tensor([1, 0])), ValueError, "x.unsqueeze"),
    ("floor-like-gru", lambda m: tasks.FloorModel(2, 2, like="GRU"), ValueError, "like='GRU' is not supported"),
    ("floor-like-none", lambda m: tasks.ProjectionsOnly(8, None), ValueError, "like=None"),
    ("floor-width-0", lambda m: tasks.ProjectionsOnly(0, "LSTM"), ValueError, "d_model"),
    ("floor-layers-0", lambda m: tasks.FloorModel(2, 2, num_layers=0), ValueError, "num_layers"),
    ("floor-tokens-float", lambda m: tasks.FloorModel(2, 2)(torch.ones(2, 3)), ValueError, "integer tokens"),
    ("lstm-tokens-1d", lambda m: _small("LSTM")(torch.tensor([1, 0, 1])), ValueError, r"integer tokens \[B, T\]"),
    ("transformer-tokens-1d", lambda m: _small("Transformer")(torch.tensor([1, 0])), ValueError, "x.unsqueeze"),
    ("transformer-tokens-float", lambda m: _small("Transformer")(torch.ones(2, 3)), ValueError, "torch.float32"),
    ("lstm-tokens-list", lambda m: _small("LSTM")([[1, 0]]), TypeError, "x must be integer tokens"),
    ("count-parameters-str", lambda m: tasks.count_parameters("model"), TypeError, "model"),
    ("model-device-none", lambda m: tasks.model_device(None), TypeError, "model"),
    # training
    ("train-model-str", lambda m: tasks.train("model", P), TypeError, "model"),
    ("train-task-list", lambda m: tasks.train(m, [P]), TypeError, "task"),
    ("train-steps-0", lambda m: tasks.train(m, P, steps=0), ValueError, "steps"),
    ("train-steps-float", lambda m: tasks.train(m, P, steps=2.0), TypeError, "steps"),
    ("train-batch-0", lambda m: tasks.train(m, P, batch_size=0), ValueError, "batch_size"),
    ("train-length-negative", lambda m: tasks.train(m, P, length=-1), ValueError, "length"),
    ("train-lr-0", lambda m: tasks.train(m, P, lr=0.0), ValueError, "lr"),
    ("train-lr-nan", lambda m: tasks.train(m, P, lr=float("nan")), ValueError, "lr"),
    ("train-lr-str", lambda m: tasks.train(m, P, lr="fast"), TypeError, "lr"),
    ("train-weight-decay-negative", lambda m: tasks.train(m, P, weight_decay=-1.0), ValueError, "weight_decay"),
    ("train-clip-negative", lambda m: tasks.train(m, P, clip=-1.0), ValueError, "clip"),
    ("train-seed-float", lambda m: tasks.train(m, P, seed=1.5), TypeError, "seed"),
    ("train-progress-int", lambda m: tasks.train(m, P, progress=5), TypeError, "progress"),
    ("train-max-seconds-0", lambda m: tasks.train(m, P, max_seconds=0), ValueError, "max_seconds"),
    ("train-schedule", lambda m: tasks.train(m, P, schedule="linear"), ValueError, "schedule"),
    ("train-warmup-negative", lambda m: tasks.train(m, P, warmup=-1), ValueError, "warmup"),
    ("train-warmup-float", lambda m: tasks.train(m, P, warmup=1.5), TypeError, "warmup"),
    ("learning-rate-step-past-end", lambda m: learning_rate(100, 100, 1e-3), ValueError, "step"),
    ("learning-rate-steps-0", lambda m: learning_rate(0, 0, 1e-3), ValueError, "steps"),
    # evaluation
    ("evaluate-samples-0", lambda m: tasks.evaluate(m, P, 4, samples=0), ValueError, "samples"),
    ("evaluate-samples-negative", lambda m: tasks.evaluate(m, P, 4, samples=-3), ValueError, "samples"),
    ("evaluate-length-0", lambda m: tasks.evaluate(m, P, 0), ValueError, "length"),
    ("evaluate-batch-0", lambda m: tasks.evaluate(m, P, 4, batch_size=0), ValueError, "batch_size"),
    ("evaluate-seed-str", lambda m: tasks.evaluate(m, P, 4, seed="a"), TypeError, "seed"),
    ("evaluate-model-none", lambda m: tasks.evaluate(None, P, 4), TypeError, "model"),
    ("lengths-float", lambda m: tasks.accuracy_vs_length(m, P, [4, 5.0]), TypeError, "lengths"),
    ("lengths-int", lambda m: tasks.accuracy_vs_length(m, P, 5), TypeError, "lengths"),
    ("lengths-empty", lambda m: tasks.accuracy_vs_length(m, P, []), ValueError, "lengths"),
    ("throughput-batch-0", lambda m: tasks.train_step_throughput(m, P, 0, 4), ValueError, "batch_size"),
    ("throughput-params-list", lambda m: tasks.train_step_throughput(m, P, 2, 4, params=[1]), TypeError, "params"),
    ("throughput-case-int", lambda m: tasks.train_step_throughput(m, P, 2, 4, case=5), TypeError, "case"),
    # experiments and results
    ("make-model-kind", lambda m: experiments.make_model("GRU", P), ValueError, "kind="),
    ("make-model-task", lambda m: experiments.make_model("LSTM", [P]), TypeError, "task"),
    ("compare-models", lambda m: tasks.compare(P, "tiny", models=("GRU",)), ValueError, "models"),
    ("compare-size", lambda m: tasks.compare(P, "huge"), ValueError, "size"),
    ("compare-size-dict", lambda m: tasks.compare(P, {"steps": 3}), ValueError, "size"),
    ("throughput-size", lambda m: tasks.throughput(size="huge"), ValueError, "size"),
    ("benchmark-size", lambda m: tasks.benchmark(size=["tiny"]), ValueError, "size"),
    ("accuracy-table-str", lambda m: tasks.accuracy_table("results"), TypeError, "results"),
    ("plot-accuracy-int", lambda m: tasks.plot_accuracy(5), TypeError, "results"),
    # graders of exercise 6
    ("grade-parity-str", lambda m: grading_tasks.grade_parity("parity"), TypeError, "parity"),
    ("grade-parity-cases", lambda m: grading_tasks.grade_parity(tasks.parity, cases=1), ValueError, "cases"),
    ("grade-evaluate-none", lambda m: grading_tasks.grade_evaluate(None), TypeError, "evaluate"),
    # reading results: a list of gpulab.bench.Result records
    ("accuracy_records-int", lambda m: tasks.results.accuracy_records(5), TypeError, "results must be a list"),
    (
        "throughput_records-items",
        lambda m: tasks.results.throughput_records([{}]),
        TypeError,
        r"results\[0\] is a dict",
    ),
    ("throughput_bound-str", lambda m: tasks.throughput_bound("results"), TypeError, "results must be a list"),
    ("throughput_bound-baseline", lambda m: tasks.throughput_bound([], baseline=3), TypeError, "baseline must be"),
    ("throughput_floors-int", lambda m: tasks.throughput_floors(3), TypeError, "results must be a list"),
    ("plot_throughput-str", lambda m: tasks.results.plot_throughput("results"), TypeError, "results must be a list"),
    ("figure-dict", lambda m: tasks.results.figure({}), TypeError, "results must be a list"),
]


@pytest.fixture
def model():
    return torch.nn.Linear(1, 1)


@pytest.mark.parametrize("call, error, word", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_by_name(model, call, error, word):
    with pytest.raises(error, match=word):
        call(model)
