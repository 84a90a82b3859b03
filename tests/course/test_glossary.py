"""Every glossary term is defined at or before its first use, reading the lessons in syllabus order; the glossary
page shows the terms' data (gpulab.course.glossary says what counts as a use and a definition)."""

import pytest

from gpulab import lessons
from gpulab.course import glossary

TERMS = glossary.load()
SLUGS = {entry.id: entry.slug for entry in lessons.LESSONS}


@pytest.fixture(scope="module")
def findings():
    return {f.term.term: f for f in glossary.check(TERMS)}


@pytest.mark.parametrize("term", [t.term for t in TERMS])
def test_term_is_defined_at_or_before_its_first_use(term, findings):
    finding = findings[term]
    assert finding.ok, finding.report(SLUGS)


def test_each_term_is_defined_in_the_lesson_the_glossary_names(findings):
    wrong = [
        f"{f.term.term!r}: the glossary says lesson {f.term.lesson}, its definition is in lesson {f.definition[1]}"
        for f in findings.values()
        if f.use is not None and f.definition is not None and not f.in_its_lesson
    ]
    assert not wrong, "fix `lesson` in gpulab/course/glossary_terms.py or move the definition:\n  " + "\n  ".join(wrong)


def test_the_glossary_includes_the_course_terms():
    names = {t.term for t in TERMS}
    need = "mbarrier PTX ptxas SASS HMMA STS.128 setmaxnreg swizzle ldmatrix TMA wgmma CTA NCCL DDP FSDP2 bpb tile"
    need = need.split() + ["warp specialization", "CTA barrier", "thread-block cluster", "distributed shared memory"]
    need += ["grid barrier", "persistent kernel", "occupancy", "wavefront", "roofline", "arithmetic intensity"]
    need += ["all-reduce", "online softmax", "logsumexp", "autotune"]
    assert not set(need) - names


def test_the_glossary_page_is_rendered_from_the_terms():
    assert not glossary.page_problems()


T = glossary.parse([{"term": "PTX", "uses": [r"\bPTX\b"], "meaning": "m", "lesson": "04"}])[0]


@pytest.mark.parametrize(
    "cell",
    [
        "The **PTX** is ...",
        "It reads **the virtual ISA (PTX)** of the kernel",
        "*PTX*: the virtual instruction set",
        "PTX (NVIDIA's virtual instruction set) is what Triton emits",
        "`PTX` (NVIDIA's virtual instruction set)",
        "| PTX | virtual ISA |\n|---|---|",
        "what Triton emits (PTX, NVIDIA's virtual instruction set)",
        "the compiler's output (`PTX`: a virtual ISA)",
    ],
)
def test_definition_forms(cell):
    assert glossary.definition_forms(T, cell)


@pytest.mark.parametrize(
    "cell",
    [
        "Triton emits PTX and more.",
        "PTX (see lesson 4) again",
        "PTX (two words)",
        "**Reading the PTX.** A run-in heading",
        "## 3. The PTX (a heading names what follows)",
        "<!-- PTX (a comment nobody reads) -->",
        "| the PTX count | 3 |",
        "(PTX, SASS)",
        "(PTX, see lesson 4)",
    ],
)
def test_not_definitions(cell):
    assert not glossary.definition_forms(T, cell)


def test_first_use_skips_headings_and_comments():
    assert glossary.first_use(T, "## PTX\n<!-- PTX -->\nno use") is None
    assert glossary.first_use(T, "## PTX\nthe PTX it emits") == "PTX"


def test_a_use_before_the_definition_fails_and_names_both_cells():
    f = glossary.Finding(T, use=(0, "04", 3, "PTX"), definition=(1, "05", 2, "**PTX**"))
    assert not f.ok and not f.in_its_lesson
    msg = f.report({"04": "04_a", "05": "05_b"})
    assert "lesson 04 (04_a), cell 3" in msg and "lesson 05, cell 2" in msg and "**PTX**" in msg
    assert glossary.Finding(T, use=(0, "04", 3, "PTX"), definition=(0, "04", 3, "**PTX**")).ok
    assert "never defined" in glossary.Finding(T, use=(0, "04", 3, "PTX"), definition=None).report({"04": "x"})


def test_render_lists_each_term_with_its_lesson():
    assert glossary.render([T]) == "| term | meaning |\n|---|---|\n| PTX | m (lesson 4) |\n"


def test_wavefront_has_one_meaning():
    """Lesson 3's wavefront is a schedule (the cells with l + t = k); a profiler's shared-memory "wavefronts" (passes
    of a shared-memory access) are another thing: say "shared-memory passes" (or define that meaning) elsewhere."""
    (term,) = [t for t in TERMS if t.term == "wavefront"]
    elsewhere = [(lesson, cell, used) for lesson, cell, used in glossary.uses(term) if lesson != term.lesson]
    assert not elsewhere, f"'wavefront' used outside lesson {term.lesson}, where it means its schedule: {elsewhere}"
