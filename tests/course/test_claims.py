"""Claims that execute (gpulab.course.claims) and outputs that do not depend on the machine (issue 36)."""

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from gpulab.course import claims, prose

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
SOLUTIONS = sorted((ROOT / "notebooks" / "src" / "solutions").glob("[0-9][0-9]_*.py"))
"""The solutions' sources: their markdown is also the exercises' task texts (nbgrader keeps it), scanned too."""
EXECUTED = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) + sorted((ROOT / "solutions").glob("*.ipynb"))


# --- claim() --------------------------------------------------------------------------------------------------------


def test_a_true_claim_renders_its_values_as_markdown():
    c = claims.claim("version {v} is faster than cuDNN on {n} of {m} problems", holds=lambda n, m, v: n == m, v=3,
                     n=12, m=12)  # fmt: skip
    assert str(c) == "version 3 is faster than cuDNN on 12 of 12 problems"
    assert c._repr_markdown_() == str(c)


@pytest.mark.parametrize(
    "template, holds, values",
    [
        (
            "head dims {dims} become compute-bound",
            lambda bound, **_: bound == "compute",
            {"dims": "60 and 100", "bound": "memory"},
        ),
        ("version 3 is faster than cuDNN on {n} of {m} problems", lambda n, m: n == m, {"n": 9, "m": 12}),
        ("one head of 768 trains at {r:.2f}x cuDNN", False, {"r": 0.97}),
    ],
    ids=["lesson2-compute-bound", "faster-on-all", "plain-false"],
)
def test_a_claim_the_records_contradict_fails_the_build(template, holds, values):
    with pytest.raises(claims.ClaimError, match="predicate is false"):
        claims.claim(template, holds=holds, **values)


def test_claim_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="template"):
        claims.claim("", holds=True)
    with pytest.raises(TypeError, match="not among values"):
        claims.claim("{missing} is faster", holds=True, n=1)


def test_paragraph_joins_claims_and_text():
    p = claims.paragraph(claims.claim("A beats B.", holds=True), "Plain text.")
    assert str(p) == "A beats B. Plain text."


# --- comparative sentences typed into markdown ----------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES + SOLUTIONS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_comparative_sentence_bypasses_claim(source):
    found = claims.bypasses(source)
    assert not found, (
        f"{source.name}: sentences that compare, rank or classify, typed into markdown: "
        f"{[(i, s[:120], w) for i, s, w in found[:6]]}; render them with gpulab.course.claims.claim from the records "
        "(or, for a definition, the math, a spec or a quoted figure, add them to claims.ALLOWED with the reason)"
    )


def test_the_allowlist_has_no_stale_entry():
    assert not claims.unused(SOURCES + SOLUTIONS), "allowlist entries that match no sentence any more: remove them"


def test_every_solution_source_is_scanned():
    assert len(SOLUTIONS) == len(SOURCES) and {p.name for p in SOLUTIONS} == {p.name for p in SOURCES}


def test_the_bypass_check_catches_a_solutions_typed_verdict(tmp_path):
    # two sentences the solutions typed before they were rendered from the records (issue 36)
    (tmp_path / "solutions").mkdir()
    src = tmp_path / "solutions" / "05_x.py"
    src.write_text(
        "# %% [markdown]\n# ## Question\n#\n# Why?\n#\n# ### BEGIN SOLUTION\n# The kernel is latency-bound: a larger "
        "batch per program fills the GPU at almost no extra time per step.\n# ### END SOLUTION\n\n# %%\nx = 1\n\n"
        "# %% [markdown]\n# The misaligned $K$ should be far behind.\n"
    )
    found = [w for _, _, w in claims.bypasses(src, allowed={})]
    assert found == [["latency-bound"], ["behind"]]
    assert claims.bypasses(src, allowed={("05", "latency-bound"): "r", ("05", "far behind"): "r"}) == []


def test_the_bypass_check_catches_the_issues_contradiction(tmp_path):
    src = tmp_path / "02_x.py"
    src.write_text(
        "# %% [markdown]\n# Only the misaligned $d = 60$ and $d = 100$ drop to the slow kernels and become "
        "compute-bound.\n\n# %%\nx = 1\n\n# %% [markdown]\n# Version 2 is 1.3x version 1; the plain cell `faster`.\n"
    )
    found = [(s, w) for _, s, w in claims.bypasses(src, allowed={})]
    assert [w for _, w in found] == [["compute-bound"], ["1.3x"]]
    assert claims.bypasses(src, allowed={("02", "drop to the slow kernels"): "r", ("02", "1.3x"): "r"}) == []


# --- machine-independent nbval outputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("notebook", EXECUTED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_compared_outputs_print_no_rounding_digits(notebook):
    found = prose.machine_digits(notebook)
    assert not found, (
        f"{notebook.relative_to(ROOT)}: cells nbval compares print digits of float rounding {found[:4]}; print the "
        "class (e.g. 'equal up to rounding (< 1e-5)') there and the digits in a cell marked # NBVAL_IGNORE_OUTPUT"
    )


def test_the_digit_scan_catches_the_ci_failure(tmp_path):
    out = "ddp_grads: largest relative difference from one process 2e-07 (equal up to rounding)\n"
    cells = [
        new_code_cell("print(diff)", outputs=[new_output("stream", name="stdout", text=out)]),
        new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(diff)", outputs=[new_output("stream", name="stdout", text=out)]),
        new_code_cell("print(x)", outputs=[new_output("stream", name="stdout", text="err < 1e-6, 0.000123, 1.5\n")]),
    ]
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    assert [(i, n) for i, n, _ in prose.machine_digits(path)] == [(0, "2e-07"), (2, "0.000123")]


def test_no_measured_comparison_is_pending():
    # every measured comparison is rendered by claim(); none may wait on the PENDING list again
    assert claims.PENDING == {}, f"measured comparisons still typed into markdown: {sorted(claims.PENDING)}"
