"""The shape of gpulab.rnn (issue 35, DESIGN.md's rule of the rooms): the public names, no module aliases, kernel files
that are leaves, one chooser per kernel family, and a call from the module down to the kernels that only goes down."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import gpulab
from gpulab import rnn, runtime
from gpulab.rnn.fused import plan
from tests import _modules

PACKAGE = Path(gpulab.__file__).resolve().parent
FAMILY = {  # lesson 5's shipped kernel modules: each a leaf, chosen between only by gpulab.rnn.fused.plan
    "gpulab.rnn.fused.forward",
    "gpulab.rnn.fused.backward",
    "gpulab.rnn.fused.split",
    "gpulab.rnn.fused.split_backward",
    "gpulab.rnn.fused.split_gluon",
    "gpulab.rnn.fused.split_gluon_backward",
    "gpulab.rnn.fused.split_gluon_tiles",
    "gpulab.rnn.fused.split_gluon_backward_tiles",
}
LADDER = {  # the lesson's numbered versions: leaves too, imported only by their package (gpulab.rnn.fused.versions)
    "gpulab.rnn.fused.versions.v1_per_gate",
    "gpulab.rnn.fused.versions.v2_all_gates",
    "gpulab.rnn.fused.versions.v3_prefetch",
}


def test_public_names_are_pinned():
    assert rnn.__all__ == [
        "LSTMWeights",
        "from_torch_lstm",
        "lstm_pointwise",
        "lstm_pointwise_reference",
        "lstm_cell_torch",
        "flashrnn",
        "BACKENDS",
        "FUNCTIONS",
        "LSTM",
        "api",
        "backends",
        "cells",
        "functions",
        "fused",
        "module",
        "ops",
        "weights",
    ]
    assert all(hasattr(rnn, name) for name in rnn.__all__)


def test_every_rnn_module_is_its_own_file_not_an_alias():
    """No ``sys.modules`` alias: a module's import name is the name it was loaded under, and its file is where the
    name says (gpulab.rnn.fused is a package of its own)."""
    loaded = {k: m for k, m in sys.modules.items() if k.startswith("gpulab.rnn") and m is not None}
    assert "gpulab.rnn.fused.plan" in loaded
    for key, module in loaded.items():
        assert module.__name__ == key, f"sys.modules[{key!r}] is {module.__name__}: an alias"
        path = Path(module.__file__).resolve().relative_to(PACKAGE.parent).with_suffix("")
        parts = path.parts[:-1] if path.name == "__init__" else path.parts
        assert ".".join(parts) == key, (key, module.__file__)
    assert Path(rnn.fused.__file__).name == "__init__.py" and not hasattr(rnn, "fused_forward")


def _below(graph: dict[str, set[str]], name: str) -> set[str]:
    """Every module ``name`` imports, directly or through others."""
    seen, todo = set(), [name]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_kernel_files_are_leaves_and_only_the_plan_imports_several():
    graph = _modules.import_graph(_modules.modules())
    assert FAMILY <= set(graph)
    measuring = "gpulab.rnn.fused.measure."  # compiles and times each kernel by name: it chooses nothing
    several = {
        name: sorted(graph[name] & FAMILY)
        for name in graph
        if len(graph[name] & FAMILY) > 1 and not name.startswith(measuring)
    }
    assert list(several) == ["gpulab.rnn.fused.plan"], several
    assert several["gpulab.rnn.fused.plan"] == sorted(FAMILY)
    for kernel in FAMILY | LADDER:  # a kernel file imports helpers below it, never another kernel or version
        assert not graph[kernel] & (FAMILY | LADDER), (kernel, graph[kernel] & (FAMILY | LADDER))
        assert not _below(graph, kernel) & (FAMILY | LADDER | {"gpulab.rnn.fused.plan", "gpulab.rnn.api"}), kernel
    ladder_users = {name for name in graph if graph[name] & LADDER}
    assert ladder_users == {"gpulab.rnn.fused.versions"}, ladder_users


def _trace(run) -> tuple[list[list[str]], set[tuple[str, str]]]:
    """Run ``run()`` under a profiler and return, for every call into a gpulab.rnn module, the chain of gpulab.rnn
    modules on the stack (outermost first, a module's consecutive frames as one), and the (caller, callee) pairs."""
    chains, edges = [], set()

    def rnn_module(frame):
        name = frame.f_globals.get("__name__", "")
        return name if name.startswith("gpulab.rnn") else None

    def profile(frame, event, arg):
        if event != "call" or rnn_module(frame) is None:
            return
        chain, f = [], frame
        while f is not None:
            m = rnn_module(f)
            if m is not None and (not chain or chain[-1] != m):
                chain.append(m)
            f = f.f_back
        chain.reverse()
        chains.append(chain)
        edges.update(zip(chain, chain[1:]))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return chains, edges


def test_a_module_call_goes_down_to_its_kernels_and_never_back_up():
    """gpulab.rnn.LSTM(num_heads=2) forward and backward (the fused backend, on one SM per head) under a profiler:
    every call into gpulab.rnn sees each module at most once on its stack (no callback into a module it left), no
    call goes to a module that imports its caller, and the chain passes exactly the expected modules."""
    torch.manual_seed(0)
    m = rnn.LSTM(24, 24, num_heads=2, backend="fused").to(runtime.device)
    x = torch.randn(3, 2, 24, device=runtime.device)
    plan.clear_cache()  # the chooser runs inside the traced call, not in an earlier test's

    def run():
        y, _ = m(x)
        y.sum().backward()

    chains, edges = _trace(run)
    again = [c for c in chains if len(c) != len(set(c))]
    assert not again, f"a module called back after it was left: {again[0]}"
    graph = _modules.import_graph(_modules.modules())
    upward = sorted((a, b) for a, b in edges if a in _below(graph, b))
    assert not upward, f"calls into a module that imports the caller: {upward}"
    visited = {m for c in chains for m in c}
    assert visited == {
        "gpulab.rnn.module",
        "gpulab.rnn.api",
        "gpulab.rnn.functions",
        "gpulab.rnn.fused.plan",
        "gpulab.rnn.fused.config",
        "gpulab.rnn.fused.tiling",
        "gpulab.rnn.layer",
        "gpulab.rnn.fused.forward",
        "gpulab.rnn.fused.tiles",
        "gpulab.rnn.cells",
        "gpulab.rnn.fused.backward",
        "gpulab.rnn.backends.parameter_grads",
    }, sorted(visited)
    assert max(chains, key=len)[:4] == ["gpulab.rnn.module", "gpulab.rnn.layer", "gpulab.rnn.fused.plan",
                                        "gpulab.rnn.fused.tiling"]  # fmt: skip
    assert x.grad is None and all(p.grad is not None and p.grad.isfinite().all() for p in m.parameters())
