"""Package faces that load their heavy parts on first use (PEP 562).

Lesson 1's ``roofline.ceilings()`` is imported by lessons 3-5 and the command line; its measurement kernels are not
needed there. A package lists such names with the module that defines them; :func:`attributes` returns the
``__getattr__``/``__dir__`` pair that imports the module when a name is first asked for.
"""

from __future__ import annotations

import importlib

__all__ = ["attributes"]


def attributes(package: str, namespace: dict, table: dict[str, str]):
    """``(__getattr__, __dir__)`` for ``package``: a name in ``table`` (name -> module) is imported on first use and
    kept in ``namespace`` (the package's ``globals()``) for the next."""

    def __getattr__(name: str):
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
