"""The shipped path stands apart: no module that ``import gpulab.attention`` or a call of
:func:`gpulab.attention.flash_attention` loads imports ``gpulab.attention.measure`` (benchmarks, record readers,
replays, compile checks) or ``gpulab.attention.experiments`` (kernels that are off by default), in its text (imports
inside functions too) or at run time; they may import it."""

import json
import subprocess
import sys
from pathlib import Path

from tests import _modules

ROOT = Path(__file__).resolve().parents[2]
APART = ("gpulab.attention.measure", "gpulab.attention.experiments")
ENTRIES = ("gpulab.attention", "gpulab.attention.function")


def _apart(name: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in APART)


def shipped_path(graph: dict[str, set[str]], entries=ENTRIES) -> set[str]:
    """Every module an entry imports, directly or through others (imports anywhere in a module's text), with the
    packages above each (importing ``a.b.c`` runs ``a`` and ``a.b`` first)."""
    seen, todo = set(), list(entries)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for m in [".".join(parts[:i]) for i in range(1, len(parts))] + [name]:
            if m in graph and m not in seen:
                seen.add(m)
                todo += sorted(graph[m])
    return seen


def offenders(graph: dict[str, set[str]], entries=ENTRIES) -> list[str]:
    """``"module imports [...]"`` for each module of the shipped path that imports a module set apart."""
    return [f"{m} imports {sorted(filter(_apart, graph[m]))}" for m in sorted(shipped_path(graph, entries))
            if any(map(_apart, graph[m]))]  # fmt: skip


def test_no_module_of_the_shipped_path_imports_measure_or_experiments():
    graph = _modules.import_graph(_modules.modules())
    path = shipped_path(graph)
    assert {"gpulab.attention.plan", "gpulab.attention.v1.forward", "gpulab.attention.v3.backward"} <= path
    assert not any(map(_apart, path)), sorted(filter(_apart, path))
    assert offenders(graph) == []


def test_the_static_check_finds_a_planted_import():
    graph = {m: set(i) for m, i in _modules.import_graph(_modules.modules()).items()}
    graph["gpulab.attention.v1.backward"].add("gpulab.attention.experiments.v1_backward_fused")  # e.g. inside a def
    planted = "gpulab.attention.v1.backward imports ['gpulab.attention.experiments.v1_backward_fused']"
    assert offenders(graph) == [planted]
    assert "gpulab.attention.experiments.v1_backward_fused" in shipped_path(graph)


_PROBE = f"""
import json, sys
import torch
import gpulab.attention as A
q, k, v = (torch.randn(1, 2, 17, 16, requires_grad=True) for _ in range(3))
A.flash_attention(q, k, v, is_causal=True).sum().backward()
assert q.grad is not None and torch.isfinite(q.grad).all()
loaded = lambda: sorted(m for m in sys.modules if m.startswith({APART!r}))
print(json.dumps(loaded()))
import gpulab.attention.measure.report  # the probe sees such a module once it is loaded
print(json.dumps(loaded()))
"""


def test_a_call_of_flash_attention_loads_no_measure_or_experiments_module():
    """A fresh process: ``import gpulab.attention`` and one tiny forward and backward of ``flash_attention`` on the
    CPU (Triton's interpreter) load no module set apart; importing one afterwards shows in the same probe."""
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after_call, after_import = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert after_call == [], after_call
    assert "gpulab.attention.measure.report" in after_import
