"""Every figure takes its colours from gpulab.course.palette: no hard-coded colour (``color="C3"``, ``c="k"``,
``colors=[...]``, a ``"#rrggbb"``, ``"tab:..."`` or ``"C0"`` string, a format string like ``"k."``) in the package's
plotting modules or the lesson sources, except the few allowed below with their reasons."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PLOTTING = [
    "gpulab/roofline/plotting.py",
    "gpulab/memory/plots.py",
    "gpulab/codesign/plot.py",
    "gpulab/rnn/ladder/plot.py",
    "gpulab/attention/measure/report.py",
    "gpulab/attention/measure/benchmark.py",
    "gpulab/rnn/fused/measure/benchmark.py",
    "gpulab/rnn/fused/measure/versions_report.py",
    "gpulab/rnn/fused/measure/split_report.py",
    "gpulab/tasks/spread.py",
    "gpulab/tasks/results.py",
    "gpulab/tasks/lm_results.py",
    "gpulab/bench/plots.py",
]
# Lessons 4 and 5 are converted separately; they join this list when they are (remove them from NOT_YET).
NOT_YET = {"notebooks/src/04_attention.py", "notebooks/src/05_fused_rnn.py"}
LESSONS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "notebooks" / "src").rglob("*.py")
    if str(p.relative_to(ROOT)) not in NOT_YET
)

ALLOWED = {  # (file, text on the line): why the colour is not a provider's
    ("gpulab/codesign/plot.py", 'colours = ("#cfe2f3"'): "plot_tiles is a diagram: pale fills, one per wave",
    ("gpulab/codesign/plot.py", 'ec="0.35"'): "plot_tiles: the tile grid's edges",
    ("gpulab/codesign/plot.py", 'ec="k"'): "plot_tiles: the output's outline",
    ("gpulab/codesign/plot.py", 'ec="C3"'): "plot_tiles: the red padding hatch its title names",
    ("gpulab/attention/measure/report.py", 'colors = {"load"'): "plot_timeline is a schematic of work kinds",
    ("gpulab/attention/measure/report.py", 'edgecolor="k"'): "plot_timeline: the boxes' outlines",
}

_KW = r"\b(?:color|c|colors|facecolor|facecolors|edgecolor|edgecolors|fc|ec|mfc|mec|markerfacecolor|markeredgecolor)"
PATTERNS = [
    re.compile(_KW + r"\s*=\s*(?:f?[\"'][^\"']*[\"']\s*[,)\]]|[\[(]\s*[\"'])"),  # color="...", colors=["...", ...]
    re.compile(r"[\"'](?:#[0-9a-fA-F]{3,8}|C[0-9]|tab:[a-z]+)[\"']"),  # a colour literal anywhere
    re.compile(r"[\"'][bgrcmykw][.o^vDx*+:-]{1,3}[\"']\s*[,)]"),  # a format string with a colour: "k.", "ro-"
]
ALLOWED_VALUES = re.compile(r"=\s*[\"'](?:none|None)[\"']")  # no colour at all is not a hard-coded one


def offenders(path: str, root: Path = ROOT) -> list[str]:
    out = []
    for n, line in enumerate((root / path).read_text().splitlines(), 1):
        code = line.split("  #")[0] if not line.lstrip().startswith("#") else ""
        hits = [m.group(0) for p in PATTERNS for m in p.finditer(code) if not ALLOWED_VALUES.search(m.group(0))]
        if hits and not any(f == path and text in line for f, text in ALLOWED):
            out.append(f"{path}:{n}: {line.strip()}")
    return out


@pytest.mark.parametrize("path", PLOTTING + LESSONS)
def test_no_hard_coded_colours(path):
    bad = offenders(path)
    assert not bad, "take colours from gpulab.course.palette (style, color, guide):\n" + "\n".join(bad)


def test_the_lint_sees_a_hard_coded_colour(tmp_path):
    lines = ['ax.plot(x, y, color="C3")', 'ax.plot(x, y, "k.")', "ax.bar(x, y, colors=['0.5'])",
             'ax.bar(x, y, color=palette.color("v3"))', 'ax.scatter(x, y, facecolors="none")',
             'm = {"a": "#00ff00"}', 'claim(c=" / ".join(v), d=1)', "ax.axhline(1, c='0.5')"]  # fmt: skip
    (tmp_path / "sample.py").write_text("\n".join(lines) + "\n")
    assert [o.split(":")[1] for o in offenders("sample.py", tmp_path)] == ["1", "2", "3", "6", "8"]


def test_the_allow_list_names_lines_that_exist():
    stale = [(f, t) for f, t in ALLOWED if t not in (ROOT / f).read_text()]
    assert not stale, f"ALLOWED names lines no longer there: {stale}"
