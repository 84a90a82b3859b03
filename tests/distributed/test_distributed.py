"""Lesson 7 on CPU: two processes with gloo compute what one process computes (DDP, FSDP2, checkpoints, resume).

One torchrun of ``gpulab.distributed.verify`` (two processes, ~5 s) serves every comparison in this file.
"""

import dataclasses
import os
import socket
import subprocess
import sys

import pytest
import torch

from gpulab.distributed import TrainConfig, init_world, local_batch_size, train, wrap
from gpulab.distributed.verify import CONFIGS, single_process_gradients


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify")
    env = {**os.environ, "GPULAB_DEVICE": "cpu", "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    rendezvous = ["--master-addr", "127.0.0.1", "--master-port", str(_free_port())]
    cmd = [*launcher, *rendezvous, "-m", "gpulab.distributed.verify", "--out", str(out), "--device", "cpu"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return torch.load(out / "results.pt", weights_only=False)


def _assert_same_gradients(got, want):
    assert got.keys() == want.keys()
    for name in want:
        err = (got[name] - want[name]).norm() / want[name].norm().clamp_min(1e-30)
        assert err < 1e-5, f"{name}: relative difference {err:.2e} between 2 ranks and one process"


def test_ddp_gradients_equal_single_process_gradients_of_the_whole_batch(two_ranks):
    assert two_ranks["world_size"] == 2
    _assert_same_gradients(two_ranks["ddp_grads"], single_process_gradients(CONFIGS["lstm"]))


def test_fsdp2_gradients_equal_single_process_gradients(two_ranks):
    _assert_same_gradients(two_ranks["fsdp2_grads"], single_process_gradients(CONFIGS["transformer"]))


def test_fsdp2_checkpoint_round_trip(two_ranks):
    assert two_ranks["fsdp2_roundtrip"] < 1e-6


def test_resume_continues_the_same_loss_curve(two_ranks):
    r = two_ranks["resume"]
    assert r["rest_start"] == 2 and len(r["first"]) == 2 and len(r["rest"]) == 2
    assert r["first"] == pytest.approx(r["straight"][:2], rel=1e-6)
    assert r["rest"] == pytest.approx(r["straight"][2:], rel=1e-5)
    assert r["straight"][0] != r["straight"][3]  # it trained


def test_a_wrong_gradient_is_caught():
    """The comparison can fail: gradients of another step's batch differ."""
    with pytest.raises(AssertionError):
        _assert_same_gradients(
            single_process_gradients(CONFIGS["lstm"], step=1), single_process_gradients(CONFIGS["lstm"])
        )


@pytest.mark.parametrize(
    "batch, world, match",
    [(6, 4, "does not split"), (0, 2, "global_batch"), (4, 0, "world_size"), (4.0, 2, "global_batch")],
    ids=["not-divisible", "zero-batch", "zero-world", "float-batch"],
)
def test_local_batch_size_refuses_bad_splits(batch, world, match):
    with pytest.raises(ValueError, match=match):
        local_batch_size(batch, world)


def test_bad_environment_and_backend_are_named(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ValueError, match="RANK=5"):
        init_world(device="cpu")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(ValueError, match="backend='nccl'"):
        init_world(backend="nccl", device="cpu")
    with pytest.raises(ValueError, match="backend"):
        init_world(backend="mpi", device="cpu")


def test_strategy_needs_a_process_group():
    world = init_world(device="cpu")
    assert world.world_size == 1 and not world.distributed
    with pytest.raises(ValueError, match="torchrun"):
        wrap(torch.nn.Linear(2, 2), "ddp", world)
    with pytest.raises(ValueError, match="strategy"):
        wrap(torch.nn.Linear(2, 2), "zero3", world)


@pytest.mark.parametrize(
    "field, value, match",
    [("model", "gru", "model"), ("steps", 0, "steps"), ("lr", float("nan"), "lr"), ("num_heads", 3, "divisible"),
     ("resume", "yes", "resume"), ("global_batch", 5, "split")],
    ids=["model", "steps", "lr-nan", "heads", "resume-str", "batch-split"],
)  # fmt: skip
def test_train_config_refuses_bad_values(field, value, match):
    config = TrainConfig(**{field: value})
    with pytest.raises(ValueError, match=match):
        config.validate(world_size=2)


def test_compiled_training_with_gpulab_kernels_equals_eager():
    """The fused LSTM kernel and FlashAttention (custom ops, here in the interpreter) inside a compiled step."""
    world = init_world(device="cpu")
    for model, kw in (("lstm", {"rnn_backend": "fused"}), ("transformer", {"attention": "flash"})):
        config = TrainConfig(model=model, d_model=16, num_layers=1, num_heads=1, global_batch=2, length=4, steps=2,
                             strategy="none", **kw)  # fmt: skip
        eager = train(config, world).losses
        compiled = train(dataclasses.replace(config, compile=True, compile_backend="aot_eager"), world).losses
        assert compiled == pytest.approx(eager, rel=1e-5), model
