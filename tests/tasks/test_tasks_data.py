"""Lesson 6: the state-tracking generators (gpulab.tasks.data): labels by hand, ranges, seeds, devices."""

import pytest
import torch

from gpulab import runtime, tasks


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
@pytest.mark.parametrize("batch,length", [(1, 1), (3, 17), (5, 40)])
def test_generators_shapes_ranges_and_seeds(gen, name, batch, length):
    task = tasks.get_task(name)
    x, y = task(batch, length, generator=gen(7))
    assert x.shape == y.shape == (batch, length) and x.dtype == y.dtype == torch.long
    assert 0 <= int(x.min()) and int(x.max()) < task.vocab and 0 <= int(y.min()) and int(y.max()) < task.classes
    x2, y2 = task(batch, length, generator=gen(7))
    assert torch.equal(x, x2) and torch.equal(y, y2), "the same seed must give the same strings"
    x3, _ = task(64, 64, generator=gen(8))
    x4, _ = task(64, 64, generator=gen(9))
    assert not torch.equal(x3, x4), "different seeds must give different strings"


def test_parity_labels_by_hand(gen):
    x = torch.tensor([[1, 0, 1, 1, 0], [0, 0, 0, 0, 1]])
    assert tasks.parity_labels(x).tolist() == [[1, 1, 0, 1, 1], [0, 0, 0, 0, 1]]
    x, y = tasks.parity(8, 33, generator=gen(1))
    for b in range(8):
        acc = 0
        for t in range(33):
            acc ^= int(x[b, t])
            assert int(y[b, t]) == acc
    assert 0.4 < tasks.parity(64, 64, generator=gen(2))[0].float().mean() < 0.6, "bits must be fair coins"


def test_modular_sum_by_hand(gen):
    x, y = tasks.modular_sum(4, 29, generator=gen(3), modulus=5)
    for b in range(4):
        assert [int(v) for v in y[b]] == [sum(int(v) for v in x[b, : t + 1]) % 5 for t in range(29)]
    x, y = tasks.modular_sum(2, 9, generator=gen(3), modulus=2)
    assert torch.equal(y, tasks.parity_labels(x)), "the sum mod 2 is parity"


def test_permutation_composition_by_hand(gen):
    perms = tasks.permutations(5)
    assert len(perms) == 120 and perms[0] == (0, 1, 2, 3, 4)
    table = tasks.composition_table(5)
    assert torch.equal(table[:, 0], torch.arange(120)) and torch.equal(table[0], torch.arange(120))
    a, b, c = 17, 55, 101
    assert table[table[a, b], c] == table[a, table[b, c]], "composition is associative"
    x, y = tasks.permutation_composition(3, 12, generator=gen(4))
    for bi in range(3):
        state = tuple(range(5))
        for t in range(12):
            p = perms[int(x[bi, t])]
            state = tuple(p[state[i]] for i in range(5))  # first the prefix, then x_t
            assert perms[int(y[bi, t])] == state


def test_integers_are_integers_whatever_the_cache(gen):
    tasks.permutation_composition(1, 2, generator=gen(0), n=5)  # n = 5 is cached now
    with pytest.raises(TypeError, match="n must be a positive integer"):
        tasks.permutation_composition(1, 2, generator=gen(0), n=5.0)


def test_generators_move_to_the_device(gen):
    x, y = tasks.parity(2, 3, generator=gen(0), device=runtime.device)
    assert x.device.type == y.device.type == runtime.device.type
