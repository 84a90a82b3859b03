"""The fused RNN's shipped path stands apart: ``gpulab.rnn`` (``LSTM``, ``flashrnn``) and everything it imports, from
the source (imports anywhere in a module, inside functions too) and from a fresh interpreter, reach nothing of
``gpulab.rnn.fused.measure``, ``gpulab.rnn.fused.experiments`` or the numbered ladder ``gpulab.rnn.fused.versions``."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from tests import _modules

ROOTS = ("gpulab.rnn", "gpulab.rnn.api", "gpulab.rnn.module", "gpulab.rnn.fused")
APART = ("gpulab.rnn.fused.measure", "gpulab.rnn.fused.experiments", "gpulab.rnn.fused.versions")


def _apart(name: str) -> bool:
    return any(name == a or name.startswith(a + ".") for a in APART)


def reached(graph: dict[str, set[str]], roots=ROOTS) -> dict[str, str]:
    """Every module the ``roots`` import, directly or through others, -> the module that imports it."""
    seen, todo = {r: r for r in roots if r in graph}, [r for r in roots if r in graph]
    while todo:
        name = todo.pop()
        for nxt in graph.get(name, ()):
            if nxt not in seen:
                seen[nxt] = name
                todo.append(nxt)
    return seen


def offenders(graph: dict[str, set[str]], roots=ROOTS) -> list[str]:
    """``'importer -> module'`` for every module of :data:`APART` the shipped path reaches."""
    return sorted(f"{by} -> {name}" for name, by in reached(graph, roots).items() if _apart(name))


def test_the_shipped_path_imports_no_measuring_experiment_or_ladder_module():
    graph = _modules.import_graph(_modules.modules())
    assert set(ROOTS) <= set(graph)
    assert "gpulab.rnn.fused.plan" in reached(graph) and "gpulab.rnn.fused.split_gluon" in reached(graph)
    assert not offenders(graph), offenders(graph)


def test_the_static_check_sees_an_import_inside_a_function(tmp_path):
    """A module of the shipped path with a function-level import of a measuring module is caught (through the same
    parser the check uses)."""
    module = tmp_path / "plan.py"
    module.write_text("def f():\n    from gpulab.rnn.fused.measure import sass\n    return sass\n")
    imports = _modules.imports("gpulab.rnn.fused.plan", module)
    graph = _modules.import_graph(_modules.modules())
    graph["gpulab.rnn.fused.plan"] = graph["gpulab.rnn.fused.plan"] | {
        f"{base}.{n}" if f"{base}.{n}" in graph else base for base, names in imports for n in names
    }
    assert "gpulab.rnn.fused.plan -> gpulab.rnn.fused.measure.sass" in offenders(graph)


_PROBE = """
import json, sys, torch
import gpulab.rnn
m = gpulab.rnn.LSTM(8, 8, num_heads=2, backend="fused")
x = torch.randn(3, 2, 8, requires_grad=True)
y, _ = m(x)
y.sum().backward()
assert x.grad is not None and x.grad.isfinite().all()
print(json.dumps(sorted(k for k in sys.modules if k.startswith("gpulab"))))
import gpulab.rnn.fused.measure.split_report
print(json.dumps(sorted(k for k in sys.modules if k.startswith("gpulab"))))
"""


@functools.lru_cache(maxsize=1)
def _loaded() -> tuple[list[str], list[str]]:
    """The gpulab modules a fresh process has loaded after the probe's LSTM, and after it then imports a measuring
    module (one process for both: each start imports torch and Triton)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    shipped, after = run.stdout.strip().splitlines()[-2:]
    return json.loads(shipped), json.loads(after)


def test_a_fresh_lstm_forward_and_backward_loads_none_of_them():
    """``import gpulab.rnn`` and a tiny ``gpulab.rnn.LSTM`` forward and backward (fused backend, interpreter) in a
    fresh process: the fused kernels load, and no measuring, experiment or ladder module does."""
    loaded, _ = _loaded()
    assert "gpulab.rnn.fused.plan" in loaded and "gpulab.rnn.fused.forward" in loaded
    assert not [m for m in loaded if _apart(m)], [m for m in loaded if _apart(m)]


def test_the_fresh_process_check_sees_a_loaded_module():
    """The same process after importing a measuring module reports it: the check above can fail."""
    _, after = _loaded()
    assert "gpulab.rnn.fused.measure.split_report" in [m for m in after if _apart(m)]
