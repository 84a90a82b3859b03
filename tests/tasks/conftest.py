"""Shared builders for lesson 6's tests: seeded generators, small models of both kinds, one CPU thread."""

import pytest
import torch

from gpulab import tasks


@pytest.fixture(autouse=True)
def _one_thread():
    """The models here are tiny: more threads only add synchronisation, and on a busy 2-core machine they wait
    for each other (10x slower). One thread is fast and steady."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def gen():
    """``gen(seed) -> torch.Generator`` seeded with ``seed``."""
    return lambda seed: torch.Generator().manual_seed(seed)


@pytest.fixture
def small_models():
    """``small_models(task, **kw) -> {"LSTM": ..., "Transformer": ...}``: d_model 16, 2 heads, seeded, CPU paths
    (vanilla LSTM, PyTorch reference attention)."""

    def make(task, **kw):
        t = tasks.get_task(task)
        torch.manual_seed(0)
        return {
            "LSTM": tasks.LSTMModel(t.vocab, t.classes, d_model=16, num_heads=2, backend="vanilla", **kw),
            "Transformer": tasks.TransformerModel(t.vocab, t.classes, d_model=16, num_heads=2, attention="naive", **kw),
        }

    return make
