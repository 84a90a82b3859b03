"""The package's shape (issue 14): no import cycle among gpulab's modules, counting imports inside functions, and no
module over 600 lines."""

from __future__ import annotations

from pathlib import Path

from tests import _modules

MAX_LINES = 600


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the gpulab modules it imports anywhere in its text (``from a import b`` counts as ``a.b`` when b is a
    module); the root package ``gpulab`` is left out: every module imports it first by being inside it."""
    return {name: edges - {"gpulab"} for name, edges in _modules.import_graph(mods).items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(import_graph(_modules.modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_600_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in _modules.modules().items()}
    long = {n: k for n, k in long.items() if k > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"
