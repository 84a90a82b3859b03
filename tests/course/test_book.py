"""The course website (gpulab.course.book, book_check): sources generated from the syllabus, nothing fetched from
another host, and (marker ``book``, run by ``make book-test`` after ``make book``) every page read in headless
Chromium, with a made-up site whose pages are wrong on purpose to show the checker catches each fault."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from gpulab import lessons as syllabus
from gpulab.bench import index as record_index
from gpulab.course import book, book_check, book_offline

ROOT = book.ROOT


# --- the static checks: no browser ---------------------------------------------------------------------------------


def test_external_resources_finds_what_a_page_would_fetch():
    page = """<html><head>
      <script src="https://cdn.example.com/mathjax.js"></script>
      <script src="_static/local.js"></script>
      <link rel="stylesheet" href="//fonts.example.com/css">
      <link rel="preload" href="http://127.0.0.1:8000/_static/font.woff2" as="font">
      <style>@import "https://fonts.example.com/x.css"; body { background: url(https://img.example.com/b.png) }</style>
    </head><body>
      <a href="https://arxiv.org/abs/2205.14135">FlashAttention</a>
      <img src="_images/fig.png"><img srcset="a.png 1x, https://img.example.com/2x.png 2x">
      <div style="background-image: url('https://img.example.com/c.png')"></div>
    </body></html>"""
    assert sorted(book_offline.external_resources(page)) == sorted(
        [
            "https://cdn.example.com/mathjax.js",
            "//fonts.example.com/css",
            "https://fonts.example.com/x.css",
            "https://img.example.com/b.png",
            "https://img.example.com/2x.png",
            "https://img.example.com/c.png",
        ]
    )  # the paper link is prose, localhost and relative paths are the site's own


def test_site_external_resources_reads_html_and_css(tmp_path):
    (tmp_path / "a.html").write_text('<script src="_static/x.js"></script>')
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "t.css").write_text("@font-face { src: url(https://fonts.example.com/f.woff2) }")
    assert book_offline.site_external_resources(tmp_path) == ["_static/t.css: https://fonts.example.com/f.woff2"]
    (tmp_path / "_static" / "t.css").write_text("@font-face { src: url(../fonts/f.woff2) }")
    assert book_offline.site_external_resources(tmp_path) == []


def test_bad_inputs_are_refused():
    with pytest.raises(TypeError, match="page must be the HTML text"):
        book_offline.external_resources(b"<html></html>")
    with pytest.raises(ValueError, match="no glossary"):
        book.glossary("# title\n\nno table here\n")
    with pytest.raises(FileNotFoundError, match="make book"):
        book_offline.site_external_resources(ROOT / "no-such-site")


def test_readme_sections_and_glossary():
    text = "# Title\n\nintro\n\n## One\n\n```bash\n# not a heading\n```\n\n## Two\n\nbody\n"
    assert [t for t, _ in book.readme_sections(text)] == ["Title", "One", "Two"]
    assert "# not a heading" in book.readme_sections(text)[1][1]
    terms = dict(book.glossary((ROOT / "docs" / "glossary.md").read_text()))
    assert len(terms) >= 10 and "SM" in terms and "warp" in terms and "streaming multiprocessor" in terms["SM"]


def test_every_module_has_one_home():
    per_lesson = book.lesson_modules()
    assert set(per_lesson) == {lesson.id for lesson in syllabus.LESSONS}
    owned = [f for files in per_lesson.values() for f in files]
    assert len(owned) == len(set(owned)), "a module listed under two lessons"
    everything = set((ROOT / "gpulab").rglob("*.py"))
    assert set(owned) | set(book.other_modules()) == everything
    ladder = ROOT / "gpulab" / "rnn" / "ladder"
    if ladder.is_dir():  # lesson 3's package is inside gpulab.rnn, which lesson 5 falls back to until gpulab.rnn.fused
        assert all(ladder in f.parents for f in per_lesson["03"])
        assert not any(ladder in f.parents for lid, files in per_lesson.items() if lid != "03" for f in files)


def test_generate_follows_the_syllabus(tmp_path, monkeypatch):
    src = tmp_path / "src"
    docs = book.generate(src)
    index = (src / "index.md").read_text()
    positions = [index.index(f"lessons/{lesson.slug}\n") for lesson in syllabus.LESSONS]
    assert positions == sorted(positions), "the toctree is not in syllabus order"
    for lesson in syllabus.LESSONS:
        if not (ROOT / lesson.notebook).exists():  # a lesson still to write gets a placeholder page
            assert f"lessons/{lesson.slug}" in docs and (src / "lessons" / f"{lesson.slug}.md").exists()
            continue
        page = json.loads((src / "lessons" / f"{lesson.slug}.ipynb").read_text())
        original = json.loads((ROOT / lesson.notebook).read_text())
        banner = "".join(page["cells"][1]["source"])
        assert "Where the results on this page come from" in banner and lesson.exercise in banner
        for part in record_index.parts(lesson.id):  # the banner names each current record's GPU, versions and date
            path = record_index.current_file(lesson.id, part, None)
            first = json.loads(path.read_text().splitlines()[0]) if path is not None else {}
            if first.get("device"):
                assert f"**{first['device']}**" in banner and first["date"][:10] in banner, (lesson.id, part)
                assert f"Triton {first['triton']}" in banner and path.name in banner
        assert "unknown device" not in banner and "newest of" not in banner
        code = [c for c in page["cells"] if c["cell_type"] == "code"]
        committed = [c for c in original["cells"] if c["cell_type"] == "code"]
        assert [c["outputs"] for c in code] == [c["outputs"] for c in committed], "outputs must be the committed ones"
        for shown, cell in zip(code, committed):  # only nbval's marker lines are taken out of the code
            kept = [x for x in "".join(cell["source"]).splitlines() if not x.startswith("# NBVAL_")]
            assert "".join(shown["source"]).splitlines() == kept
        for f in book.lesson_modules()[lesson.id]:
            assert book._source_doc(f, ROOT) in docs
    for doc in docs:
        if doc.startswith("source/gpulab"):
            text = (src / f"{doc}.md").read_text()
            target = re.search(r"\{literalinclude\} (\S+)", text).group(1)
            assert (src / doc).parent.joinpath(target).resolve().is_file()
    assert "```{glossary}" in (src / "glossary.md").read_text()
    for name in ("install", "package", "results", "glossary"):  # the docs/ pages, and every lab notes page
        assert f"docs/{name}" in docs and f"docs/{name}" in index
    for path in (ROOT / "notes").glob("*.md"):
        assert f"notes/{path.stem}" in docs and f"notes/{path.stem}" in index
    assert ":caption: Lab notes" in index

    # Each old lesson's address stays: an orphan page linking what it became, sending the browser to the first.
    for old, new_ids in syllabus.RENAMED.items():
        for suffix in ("", "_exercise"):
            text = (src / "lessons" / f"{old}{suffix}.md").read_text()
            first = next(e for e in syllabus.LESSONS if e.id == new_ids[0])
            assert text.startswith("---\norphan: true\n---\n") and f"url={first.slug}{suffix}.html" in text, old
            assert all(f"]({e.slug}{suffix}." in text for e in syllabus.LESSONS if e.id in new_ids), old
            assert f"lessons/{old}{suffix}" in docs and f"lessons/{old}\n" not in index

    # A lesson added to the syllabus gets its pages without touching the generator.
    extra = syllabus.Lesson("10", "10_new_lesson", "A lesson still to write", "gpulab.nothing_yet")
    monkeypatch.setattr(book, "lessons", lambda: [*syllabus.LESSONS, extra])
    docs = book.generate(src)
    assert "lessons/10_new_lesson" in docs and "source/lesson-10" in docs
    assert book.lesson_modules()["10"] == [], "a package not written yet has no modules (not the whole of gpulab)"
    assert "(lessons/10_new_lesson.md)" in (src / "index.md").read_text()  # a placeholder page until the notebook
    assert "lessons/10_new_lesson" in (src / "index.md").read_text()


# --- in the browser (make book-test) ---------------------------------------------------------------------------------


def _need_browser():
    import importlib.util

    missing = []
    if book_check.find_chromium() is None:
        missing.append("Chromium (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        missing.append("Playwright (pip install -e '.[book]')")
    if missing:
        message = "the browser test needs " + " and ".join(missing)
        if os.environ.get("GPULAB_REQUIRE_BROWSER") == "1":
            pytest.fail(message + "; GPULAB_REQUIRE_BROWSER=1 makes that a failure (CI sets it)")
        pytest.skip(message)


@pytest.mark.book
def test_the_built_site_reads_well_offline():
    _need_browser()
    site = Path(os.environ.get("GPULAB_BOOK_SITE", book.OUT))
    if not (site / "index.html").exists():
        pytest.fail(f"no built site in {site}: run `make book` first (make book-test does)")
    assert book_offline.site_external_resources(site) == []
    problems = book_check.check_site(site, screenshots=site.parent / "failures")
    assert not problems, f"{len(problems)} problems (screenshots in {site.parent / 'failures'}):\n" + "\n".join(
        problems
    )


_PAGES = {
    "good.html": '<h1 id="top">fine</h1><a href="other.html#here">a link</a><a href="#top">up</a>'
    '<img src="fig.png"><pre>$$ code may show dollars \\( \\)</pre>',
    "other.html": '<p id="here">the target</p><a href="https://arxiv.org/abs/2205.14135">a paper is prose</a>',
    "broken_link.html": '<a href="missing.html">gone</a>',
    "missing_anchor.html": '<a href="other.html#nowhere">no such anchor</a>',
    "missing_image.html": '<img src="no-such-figure.png">',
    "external_script.html": '<script src="https://cdn.example.com/mathjax.js"></script>',
    "raw_math.html": "<p>$$ y = \\sum_i x_i $$</p>",
    "raw_inline_math.html": "<p>the time is $2Ns / B_\\text{HBM}$</p>",
    "console_error.html": "<script>console.error('boom')</script>",
    "traceback.html": '<div class="cell_output"><div class="output traceback">ValueError: x</div></div>',
    "unrendered.html": '<span class="math notranslate nohighlight">x</span>',
    "moved.html": '<meta http-equiv="refresh" content="0; url=good.html"><p>now <a href="good.html">good</a></p>',
    "moved_nowhere.html": '<meta http-equiv="refresh" content="0; url=gone.html"><p>now <a href="gone.html">g</a></p>',
}
_EXPECTED = {
    "broken_link.html": "broken link to /missing.html",
    "missing_anchor.html": "link to a missing anchor /other.html#nowhere",
    "missing_image.html": "image does not load: /no-such-figure.png",
    "external_script.html": "request to another host blocked: https://cdn.example.com/mathjax.js",
    "raw_math.html": "math left as text: raw $$",
    "raw_inline_math.html": "math left as text: unrendered TeX",
    "console_error.html": "console error: boom",
    "traceback.html": "error output in the page",
    "unrendered.html": "math not rendered: 0 of 1 math elements (MathJax not loaded)",
    "moved_nowhere.html": "redirects to gone.html, which is no page of the site",
}


@pytest.mark.book
def test_the_checker_catches_each_fault(tmp_path):
    _need_browser()
    site = tmp_path / "site"
    site.mkdir()
    for name, body in _PAGES.items():
        (site / name).write_text(f"<!doctype html><html><head><title>{name}</title></head><body>{body}</body></html>")
    from PIL import Image  # matplotlib's dependency

    Image.new("RGB", (4, 3), "white").save(site / "fig.png")  # a real figure, so the good page's image loads
    problems = book_check.check_site(site, screenshots=tmp_path / "shots")
    by_page = {}
    for line in problems:
        page, _, what = line.partition(": ")
        by_page.setdefault(page, []).append(what)
    assert not {"good.html", "other.html", "moved.html"} & set(by_page), problems  # a redirect is read, not opened
    for page, expected in _EXPECTED.items():
        assert any(expected in what for what in by_page.get(page, [])), f"{page}: {expected!r} not in {problems}"
    assert len(list((tmp_path / "shots").glob("*.png"))) == 2
