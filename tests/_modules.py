"""gpulab's modules as the layout tests read them (tests/test_package_layout.py, tests/test_kernel_families.py,
tests/rnn/test_rnn_layout.py): every module's dotted name and path, and the imports of its source, anywhere in it
(inside functions too), with relative imports resolved to full dotted names."""

from __future__ import annotations

import ast
from pathlib import Path

import gpulab

PACKAGE = Path(gpulab.__file__).resolve().parent


def modules() -> dict[str, Path]:
    """``"gpulab.rnn.fused"`` -> its file (a package is its ``__init__.py``), for every module of gpulab, sorted."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, tree: ast.AST | None = None) -> list[tuple[str, tuple[str, ...]]]:
    """``(module, names)`` for every import statement of module ``name`` (its file ``path``, or the parsed ``tree``):
    ``import a.b`` gives ``("a.b", ())``, ``from ..x import y, z`` inside ``gpulab.p.q`` gives ``("gpulab.x", ("y",
    "z"))``."""
    tree = ast.parse(path.read_text(), filename=str(path)) if tree is None else tree
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(head + ([base] if base else []))
            out.append((base, tuple(a.name for a in node.names)))
    return out


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ``mods`` it imports (not itself); ``from a import b`` counts as ``a.b`` when ``a.b`` is
    a module, else as ``a``."""
    graph = {}
    for name, path in mods.items():
        found = set()
        for base, names in imports(name, path):
            found |= {f"{base}.{n}" if f"{base}.{n}" in mods else base for n in names} if names else {base}
        graph[name] = {m for m in found if m in mods and m != name}
    return graph
