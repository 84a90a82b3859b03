"""Bad input to lesson 7's public functions (gpulab.distributed): each refused before any process group, file or
training step is touched, with a TypeError or ValueError whose message names the argument (table-driven)."""

import sys

import pytest
import torch

import gpulab.distributed.benchmark  # noqa: F401 - modules by their full names (the function train shadows train)
from gpulab.distributed import World, load_checkpoint, local_batch_size, save_checkpoint, shutdown, wrap
from gpulab.distributed.data import global_batch
from gpulab.distributed.verify import CONFIGS, run_checks, single_process_gradients

dbench = sys.modules["gpulab.distributed.benchmark"]

_MODEL = torch.nn.Linear(2, 2)
_OPT = torch.optim.SGD(_MODEL.parameters(), lr=0.1)
_ONE = World()


def _step():
    pass


CASES = [
    # World: a world of one by default; every field checked when built by hand
    ("World-rank-negative", lambda: World(rank=-1), ValueError, "rank must be a non-negative integer, got -1"),
    ("World-rank-too-big", lambda: World(rank=2, world_size=2), ValueError, "rank=2 must lie in [0, world_size=2)"),
    ("World-rank-float", lambda: World(rank=0.0), TypeError, "rank must be a non-negative integer, got 0.0"),
    ("World-world_size-0", lambda: World(world_size=0), ValueError, "world_size must be a positive integer, got 0"),
    ("World-world_size-str", lambda: World(world_size="2"), TypeError, "world_size must be a positive integer"),
    ("World-local_rank", lambda: World(local_rank=-1), ValueError, "local_rank must be a non-negative integer"),
    ("World-local_rank-bool", lambda: World(local_rank=True), TypeError, "local_rank must be"),
    ("World-device-name", lambda: World(device="tpu"), ValueError, "device='tpu' is not a device"),
    ("World-device-float", lambda: World(device=0.0), TypeError, "device must be a torch.device"),
    ("World-backend", lambda: World(backend="mpi"), ValueError, "backend='mpi' is not supported"),
    # the process group
    ("shutdown-none", lambda: shutdown(None), TypeError, "world must be the gpulab.distributed.World"),
    ("shutdown-str", lambda: shutdown("gloo"), TypeError, "got str"),
    ("wrap-model", lambda: wrap("lstm", "none", _ONE), TypeError, "model must be a torch.nn.Module"),
    ("wrap-world", lambda: wrap(_MODEL, "none", None), TypeError, "world must be the gpulab.distributed.World"),
    ("wrap-strategy", lambda: wrap(_MODEL, "fsdp", _ONE), ValueError, "strategy='fsdp'"),
    # the data of a step
    ("local_batch_size-split", lambda: local_batch_size(5, 2), ValueError, "global_batch=5 does not split"),
    ("local_batch_size-0", lambda: local_batch_size(4, 0), ValueError, "world_size must be a positive integer"),
    ("local_batch_size-float", lambda: local_batch_size(4.0, 1), TypeError, "global_batch must be"),
    ("global_batch-batch_size", lambda: global_batch("parity", 0, 0, 8), ValueError, "batch_size must be"),
    ("global_batch-length", lambda: global_batch("parity", 0, 4, 2.5), TypeError, "length must be"),
    ("global_batch-seed", lambda: global_batch("parity", 0, 4, 8, seed=-1), ValueError, "seed must be"),
    # timing a step
    ("step_time-steps-0", lambda: dbench.step_time(_step, _ONE, 0), ValueError, "steps must be a positive integer"),
    ("step_time-steps-float", lambda: dbench.step_time(_step, _ONE, 2.0), TypeError, "steps must be"),
    ("step_time-warmup", lambda: dbench.step_time(_step, _ONE, 1, warmup=-1), ValueError, "warmup must be"),
    ("step_time-repeats-0", lambda: dbench.step_time(_step, _ONE, 1, repeats=0), ValueError, "repeats must be"),
    ("step_time-repeats-str", lambda: dbench.step_time(_step, _ONE, 1, repeats="3"), TypeError, "repeats must be"),
    # checkpoints
    ("save_checkpoint-optimizer", lambda: save_checkpoint("/tmp/x", _MODEL, "adam", 0), TypeError, "optimizer"),
    ("load_checkpoint-path", lambda: load_checkpoint(3, _MODEL, _OPT), TypeError, "path must be a folder path"),
    ("load_checkpoint-model", lambda: load_checkpoint("/tmp", None, _OPT), TypeError, "model must be"),
    ("load_checkpoint-optimizer", lambda: load_checkpoint("/tmp", _MODEL, {}), TypeError, "optimizer must be"),
    ("load_checkpoint-file", lambda: load_checkpoint(__file__, _MODEL, _OPT), ValueError, "is a file"),
    # the checks lesson 7's tests run
    ("single_process_gradients-config", lambda: single_process_gradients("lstm"), TypeError, "config must be"),
    ("single_process_gradients-step", lambda: single_process_gradients(CONFIGS["lstm"], -1), ValueError, "step"),
    ("run_checks-out", lambda: run_checks(None), TypeError, "out must be a folder path"),
]


@pytest.mark.parametrize("call, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_naming_the_argument(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value), f"the message should name the argument ({message!r}): {info.value}"


def test_a_world_of_one_and_its_normalised_fields():
    assert World() == World(0, 1, 0, torch.device("cpu"), None)
    assert World(device="cpu").device == torch.device("cpu")
    shutdown(World())  # no process group: nothing to close, no error


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_a_checkpoint_without_optimizer_round_trips(tmp_path):
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path / "c", model, None, 3)
    fresh = torch.nn.Linear(2, 2)
    assert load_checkpoint(tmp_path / "c", fresh, None) == 3
    assert torch.equal(fresh.weight, model.weight)
