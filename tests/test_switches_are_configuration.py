"""Switches are configuration, not globals: no test, script or lesson patches or assigns an UPPER_CASE global of a
kernel family's module (gpulab.attention, gpulab.rnn, and gpulab.launch, which they launch through) from outside it;
a switch is a frozen config passed in (plan.BackwardGate, V3BackwardConfig) or a function argument (tune_v3's short_n,
clear_plan_cache's max_plans, launch.through_jit)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("gpulab.attention", "gpulab.rnn", "gpulab.launch")
SETATTR = re.compile(r"monkeypatch\.setattr\(\s*([A-Za-z_][\w.]*)\s*,\s*[\"']([A-Z][A-Z0-9_]*)[\"']")
ASSIGN = re.compile(r"^\s*([A-Za-z_][\w.]*)\.([A-Z][A-Z0-9_]*)\s*(?:[-+*/|&]?=)(?!=)", re.M)
IMPORT_AS = re.compile(r"^\s*import\s+(gpulab(?:\.\w+)*)(?:\s+as\s+(\w+))?", re.M)
FROM_IMPORT = re.compile(r"^\s*from\s+(gpulab(?:\.\w+)*)\s+import\s+(?:\(([^)]*)\)|([^\n(]+)$)", re.M)


def _module_names(text: str) -> dict[str, str]:
    """Local name -> the gpulab module (or name in one) it was imported as."""
    names = {}
    for m in IMPORT_AS.finditer(text):
        names[m.group(2) or m.group(1)] = m.group(1)
    for m in FROM_IMPORT.finditer(text):
        for item in (m.group(2) or m.group(3)).replace("\n", " ").split(","):
            parts = item.split("#")[0].split()
            if parts:
                names[parts[-1]] = f"{m.group(1)}.{parts[0]}"
    return names


def offenders(path: Path, root: Path = ROOT) -> list[str]:
    """``path:line: module.NAME`` for each patch or assignment of a kernel family module's UPPER_CASE global."""
    text = path.read_text(encoding="utf-8")
    names = _module_names(text)
    own = ".".join(path.relative_to(root).with_suffix("").parts)
    found = []
    for pattern in (SETATTR, ASSIGN):
        for m in pattern.finditer(text):
            head, _, rest = m.group(1).partition(".")
            target = names.get(head, "") + (f".{rest}" if rest else "")
            if target.startswith(FAMILIES) and target != own:
                line = text.count("\n", 0, m.start()) + 1
                found.append(f"{path.relative_to(root)}:{line}: {target}.{m.group(2)}")
    return found


def _files():
    for folder in ("tests", "gpulab", "scripts", "notebooks/src", "solutions"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_family_global_is_patched_or_assigned_from_outside_its_module():
    found = [line for path in _files() for line in offenders(path)]
    assert not found, "switches set from outside their module (pass a config or an argument instead):\n" + "\n".join(
        found
    )


def test_the_scan_finds_a_planted_patch_and_assignment(tmp_path):
    planted = tmp_path / "tests" / "test_planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "from gpulab.attention import plan as P\nimport gpulab.rnn.fused.plan as rplan\n"
        "from gpulab import runtime\n\n"
        'def test_x(monkeypatch):\n    monkeypatch.setattr(P, "MAX_PLANS", 3)\n    rplan.SPLIT_VERSION = "v5"\n'
        '    monkeypatch.setattr(runtime, "INTERPRET", False)\n    P.V3_BACKWARD == 1\n'
    )
    assert offenders(planted, tmp_path) == [
        "tests/test_planted.py:6: gpulab.attention.plan.MAX_PLANS",
        "tests/test_planted.py:7: gpulab.rnn.fused.plan.SPLIT_VERSION",
    ]
    # a module assigning its own global is not an offender
    own = tmp_path / "gpulab" / "attention" / "plan.py"
    own.parent.mkdir(parents=True)
    own.write_text("import gpulab.attention.plan as me\nme.MAX_PLANS = 3\n")
    assert offenders(own, tmp_path) == []
