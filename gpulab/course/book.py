"""The course as a static website: Sphinx + myst-nb pages generated from the syllabus, built offline.

- :func:`generate` writes the Sphinx sources (``book/_src/``) from :data:`gpulab.lessons.LESSONS`, the executed
  notebooks in ``notebooks/`` (copied, never executed), the exercise notebooks, the README and the package's files:
  one page per lesson with a banner naming the GPU and date of its records, its exercise page, one page per module
  of the lesson's package (``literalinclude``), the README's sections, the ``docs/`` pages and the glossary, and
  every ``notes/*.md`` under "Lab notes". A new lesson in the syllabus
  or a new module in a lesson's package appears without editing anything here.
- :func:`build` runs Sphinx on them with ``book/conf.py`` into ``book/_build/html`` (``make book``).
- :func:`gpulab.course.book_offline.external_resources` lists the scripts, styles, fonts and images of an HTML page
  that would be fetched from another host; the built site must have none (it is read offline).
  :mod:`gpulab.course.book_check` opens every page in headless Chromium.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from pathlib import Path

from gpulab import lessons as _lessons
from gpulab.bench import index
from gpulab.course import book_offline
from gpulab.course.book_pages import redirect_page

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
SRC = BOOK / "_src"
OUT = BOOK / "_build" / "html"

__all__ = [
    "ROOT",
    "BOOK",
    "SRC",
    "OUT",
    "lessons",
    "lesson_modules",
    "other_modules",
    "record_banner",
    "readme_sections",
    "glossary",
    "generate",
    "build",
    "mathjax_dir",
    "main",
]


def lessons():
    """The syllabus, :data:`gpulab.lessons.LESSONS` (a function, so tests can stand in another)."""
    return _lessons.LESSONS


def _module_path(module: str, root: Path) -> Path | None:
    """The package folder or module file of a dotted name (no import); None if neither exists."""
    base = root.joinpath(*module.split("."))
    if base.is_dir() and (base / "__init__.py").exists():
        return base
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def _dotted(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _files(path: Path) -> list[Path]:
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def lesson_modules(root: Path = ROOT) -> dict[str, list[Path]]:
    """Lesson id -> the .py files of its package (``Lesson.module``), in path order.

    A package that does not exist (yet) stands for its nearest existing parent below ``gpulab`` (none for
    ``gpulab.x``); a package holds its subpackages,
    except those that are another lesson's package (``gpulab.rnn`` without ``gpulab.rnn.ladder``); a package two
    lessons build (``gpulab.attention``: lessons 4 and 5) is listed under the first."""
    found = {}
    for lesson in lessons():
        name = lesson.module
        path = _module_path(name, root)
        while path is None and name.count(".") > 1:  # never the whole package: gpulab.x stands for nothing
            name = name.rsplit(".", 1)[0]
            path = _module_path(name, root)
        found[lesson.id] = path
    result, first = {}, {}
    for lid, path in found.items():
        if path is None or first.setdefault(path, lid) != lid:  # a package two lessons build: listed under the first
            result[lid] = []
            continue
        others = [p for o, p in found.items() if o != lid and p is not None and p != path and p.is_dir()]
        result[lid] = [f for f in _files(path) if not any(o in f.parents for o in others if path in o.parents)]
    return result


def other_modules(root: Path = ROOT) -> list[Path]:
    """The package's .py files that belong to no lesson (foundations, timing, the course machinery)."""
    taken = {f for files in lesson_modules(root).values() for f in files}
    return [f for f in sorted((root / "gpulab").rglob("*.py")) if f not in taken]


def _read_records(path: Path) -> list[dict]:
    """The records of a JSON-lines file as dicts (the fields :class:`gpulab.bench.Result` stores)."""
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def record_banner(lesson, root: Path = ROOT) -> list[dict]:
    """Where the lesson's stored results come from: for each part of the lesson in ``benchmarks/INDEX.json``
    (:mod:`gpulab.bench.index`), its current file, the device, versions and date its records name (the first record
    that names each), and the most GPUs one of its records ran on (``params["world_size"]``, 1 without it). A record
    of compiled code only (no device) names its target ('sm_90') instead."""
    bench_root = root / "benchmarks"
    rows = []
    for part in index.parts(lesson.id, bench_root):
        for path in index.current(lesson.id, part, None, bench_root):
            if path.suffix != ".jsonl" or not path.exists():
                continue
            recs = _read_records(path)

            def first(field, recs=recs):
                return next((str(r[field]) for r in recs if r.get(field)), "")

            target = first("target")
            gpus = max((int((r.get("params") or {}).get("world_size") or 1) for r in recs), default=1)
            rows.append(
                {
                    "part": part,
                    "path": path,
                    "device": first("device") or (f"compiled for {target}, not run" if target else "no device named"),
                    "torch": first("torch"),
                    "triton": first("triton"),
                    "date": first("date")[:10],
                    "gpus": gpus,
                }
            )
    return rows


def readme_sections(text: str) -> list[tuple[str, str]]:
    """The README as (title, markdown) per ``## `` section; the text before the first one is titled by the H1.
    Fenced code is not searched for headings."""
    sections, title, body, fence = [], None, [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and (line.startswith("# ") or line.startswith("## ")):
            if title is not None or any(x.strip() for x in body):
                sections.append((title or "", "\n".join(body).strip() + "\n"))
            title, body = line.lstrip("#").strip(), []
            continue
        body.append(line)
    sections.append((title or "", "\n".join(body).strip() + "\n"))
    return sections


_GLOSSARY = re.compile(r"\*\*Glossary\.\*\*\s*\n\s*\n(\|.*?\n)(?:\s*\n|\Z)", re.S)


def glossary(text: str) -> list[tuple[str, str]]:
    """The glossary table of ``docs/glossary.md`` (after ``**Glossary.**``) as (term, meaning) rows; a ValueError
    without one."""
    m = _GLOSSARY.search(text)
    if m is None:
        raise ValueError(
            "docs/glossary.md has no glossary: a '**Glossary.**' paragraph followed by a | term | meaning | table."
        )
    rows = [line.strip().strip("|").split("|", 1) for line in m.group(1).strip().splitlines()]
    rows = [(a.strip(), b.strip()) for a, b in (r for r in rows if len(r) == 2)]
    return [(a, b) for a, b in rows[1:] if not set(a) <= set("-: ")]  # header and rule dropped


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _rel(target: Path, start: Path) -> str:
    return Path(os.path.relpath(target, start)).as_posix()


_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)([^)]*\))")


_PAGES = re.compile(r"^(?:docs|notes)/[\w.-]+\.md$|^notebooks/(?P<lesson>\d\d_\w+)\.ipynb$")


def _relink(markdown: str, page_dir: Path, root: Path, base: Path | None = None, src: Path | None = None) -> str:
    """Relative links and images of a page's text (relative to ``base``, default the repository root) made relative
    to ``page_dir``. With ``src`` (the site's sources), a link to a ``docs/`` or ``notes/`` page or to a lesson's
    notebook goes to that page of the site; any other link to the repository's files stays a link to the file."""

    def fix(m):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return m.group(0)
        path = (base or root) / target
        in_repo = Path(os.path.relpath(path, root)).as_posix()
        page = _PAGES.match(in_repo) if src is not None else None
        if page is not None:
            name = page["lesson"]
            doc = src / (f"lessons/{name}.ipynb" if name else in_repo)
            return m.group(1) + _rel(doc, page_dir) + m.group(3)
        return m.group(1) + _rel(path, page_dir) + m.group(3)

    return _LINK.sub(fix, markdown)


def _source_doc(path: Path, root: Path) -> str:
    """The docname of a module's source page, e.g. 'source/gpulab.memory.kernels'."""
    return "source/" + (_dotted(path, root) + (".__init__" if path.name == "__init__.py" else ""))


def _summary(path: Path) -> str:
    """The first sentence of a module's docstring, for a table cell (read with ast: nothing is imported)."""
    import ast

    try:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    except SyntaxError:
        doc = ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    first = re.split(r"(?<=\.)\s", first, maxsplit=1)[0]  # the first sentence
    first = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", first)  # reST roles and ``literals`` as Markdown code
    first = first.replace("``", "`")
    if len(first) > 200:
        first = first[:197].rsplit(" ", 1)[0] + " ..."
    return first.replace("|", "\\|") or "—"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:  # unchanged files keep their time: Sphinx rebuilds less
        path.write_text(text)


def _lesson_doc(lesson, root: Path, suffix: bool = True) -> str:
    """The lesson's page under lessons/: the executed notebook, or a placeholder page until there is one."""
    name = lesson.slug
    return name + ((".ipynb" if (root / lesson.notebook).exists() else ".md") if suffix else "")


def _banner(lesson, root: Path, src: Path) -> str:
    page_dir = src / "lessons"
    lines = ["```{admonition} Where the results on this page come from", ":class: note", ""]
    rows = record_banner(lesson, root)
    if rows:
        for row in rows:
            versions = ", ".join(
                x
                for x in (
                    f"torch {row['torch']}" if row["torch"] else "",
                    f"Triton {row['triton']}" if row["triton"] else "",
                )
                if x
            )
            where = _rel(row["path"], root)
            gpus = f" (up to {row['gpus']} GPUs)" if row["gpus"] > 1 else ""
            versions = f", {versions}" if versions else ""
            lines.append(
                f"- {row['part']}: **{row['device']}**{gpus}{', ' + row['date'] if row['date'] else ''}{versions}: "
                f"{{download}}`{where} <{_rel(row['path'], page_dir)}>`"
            )
        lines += [
            "",
            "GPU figures and tables are drawn from these records. Code outputs are those of the executed notebook "
            "as committed (the course executes notebooks on CPU, in Triton's interpreter, so the times they print "
            "are interpreter times).",
        ]
    else:
        lines.append("No GPU records are stored for this lesson yet; code outputs are those of the executed notebook.")
    exercise, notebook = root / lesson.exercise, root / lesson.notebook  # downloads only of files that exist
    ex_page = f"{lesson.slug}_exercise" + (".ipynb" if exercise.exists() else ".md")
    links = [f"**Exercise:** [{lesson.exercise}]({ex_page})"]
    if exercise.exists():
        links[0] += f" ({{download}}`download <{_rel(exercise, page_dir)}>`)"
    if notebook.exists():
        links.append(f"**Notebook:** {{download}}`{lesson.notebook} <{_rel(notebook, page_dir)}>`")
    links.append(f"**Package source:** [{lesson.module}](../source/lesson-{lesson.id}.md)")
    lines += [
        "",
        " · ".join(links),
        "```",
        "",
        "```{toctree}",
        ":hidden:",
        "",
        f"{lesson.slug}_exercise",
        f"../source/lesson-{lesson.id}",
        "```",
    ]
    return "\n".join(lines) + "\n"


_NBVAL = re.compile(r"^# ?NBVAL_[A-Z_]+[^\n]*\n?", re.M)


def _notebook_copy(path: Path, banner: str | None, title: str | None = None) -> str:
    """The notebook's JSON with a markdown cell inserted after its first cell, nbval's ``# NBVAL_...`` marker lines
    taken out of code cells, outputs untouched."""
    nb = json.loads(path.read_text())
    nb = copy.deepcopy(nb)
    cells = nb.get("cells", [])
    new = []
    if title is not None and not (
        cells
        and cells[0].get("cell_type") == "markdown"
        and "".join(cells[0].get("source", "")).lstrip().startswith("# ")
    ):
        new.append({"cell_type": "markdown", "metadata": {}, "source": f"# {title}\n"})
    if banner:
        cell = {"cell_type": "markdown", "metadata": {}, "source": banner}
        at = 1 if cells and cells[0].get("cell_type") == "markdown" else 0
        cells.insert(at, cell)
    for cell in cells:  # nbval's markers are for the test run, not for a reader; outputs stay as they are
        if cell.get("cell_type") == "code":
            source = "".join(cell.get("source", ""))
            cell["source"] = _NBVAL.sub("", source)
    nb["cells"] = new + cells
    if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5:
        for i, c in enumerate(nb["cells"]):
            c.setdefault("id", f"book-{i}")
    return json.dumps(nb, indent=1, ensure_ascii=False)


def generate(src: Path = SRC, root: Path = ROOT) -> list[str]:
    """Write the Sphinx sources of the site into ``src`` (emptied first); return the docnames written."""
    src, root = Path(src), Path(root)
    readme = (root / "README.md").read_text()
    docs = []

    def page(doc: str, text: str, suffix: str = ".md"):
        _write(src / (doc + suffix), text)
        docs.append(doc)

    syllabus = lessons()
    modules = lesson_modules(root)

    # Lessons: the executed notebooks as committed, with the banner; their exercises.
    for lesson in syllabus:
        nb = root / lesson.notebook
        if nb.exists():
            page(f"lessons/{lesson.slug}", _notebook_copy(nb, _banner(lesson, root, src)), ".ipynb")
        else:
            page(
                f"lessons/{lesson.slug}",
                f"# {lesson.id}. {lesson.title}\n\n_The notebook {lesson.notebook} "
                f"is not built yet._\n\n" + _banner(lesson, root, src),
            )
        ex = root / lesson.exercise
        back = f"Exercises for [lesson {lesson.id}: {lesson.title}]({lesson.slug}.ipynb); " if nb.exists() else ""
        ex_banner = (
            f"```{{tip}}\n{back}download the notebook to solve it: "
            f"{{download}}`{lesson.exercise} <{_rel(ex, src / 'lessons')}>`, then "
            f"`make grade NB={lesson.exercise}`.\n```\n"
        )
        if ex.exists():
            page(
                f"lessons/{lesson.slug}_exercise",
                _notebook_copy(ex, ex_banner, f"Exercises {lesson.id}: {lesson.title}"),
                ".ipynb",
            )
        else:
            page(f"lessons/{lesson.slug}_exercise", f"# Exercises {lesson.id}\n\n_Not generated yet._\n")

    for old, new_ids in _lessons.RENAMED.items():  # an old lesson's address sends the reader to what it became
        for suffix in ("", "_exercise"):
            page(f"lessons/{old}{suffix}", redirect_page(old, [e for e in syllabus if e.id in new_ids], root, suffix))

    # Package source: one page per module file, grouped by lesson, then the rest.
    def source_pages(files: list[Path], back: str) -> list[str]:
        names = []
        for f in files:
            doc = _source_doc(f, root)
            name = _dotted(f, root)
            lines = f.read_text().count("\n")
            page(
                doc,
                f"# `{name}`\n\n`{f.relative_to(root).as_posix()}`, {lines} lines; {back}.\n\n"
                f"```{{literalinclude}} {_rel(f, (src / doc).parent)}\n:language: python\n:linenos:\n```\n",
            )
            names.append(doc)
        return names

    def module_table(files: list[Path], names: list[str]) -> list[str]:
        rows = ["| module | what it holds |", "|---|---|"]
        for f, doc in zip(files, names):
            rows.append(f"| [`{_dotted(f, root)}`]({doc.split('/', 1)[1]}.md) | {_summary(f)} |")
        hidden = ["```{toctree}", ":hidden:", "", *[n.split("/", 1)[1] for n in names], "```"]
        return [*rows, "", *hidden] if files else []

    groups = []
    for lesson in syllabus:
        files = modules.get(lesson.id, [])
        doc = f"source/lesson-{lesson.id}"
        names = source_pages(files, f"built in [lesson {lesson.id}](../lessons/{_lesson_doc(lesson, root)})")
        shown = _dotted(files[0], root) if files and files[0].name == "__init__.py" else lesson.module
        body = [
            f"# Source of lesson {lesson.id}: `{lesson.module}`",
            "",
            f"The package modules that [lesson {lesson.id}](../lessons/{_lesson_doc(lesson, root)}) builds "
            f"({len(files)} files), as they are in this version of the course.",
            "",
        ]
        shared = next((o for o in syllabus if o.module == lesson.module and o.id < lesson.id), None)
        if not files and shared is not None:
            body.append(f"`{lesson.module}` is lesson {shared.id}'s package too: [its modules](lesson-{shared.id}.md).")
        elif not files:
            body.append(f"_No module `{lesson.module}` in this version of the package._")
        elif shown != lesson.module:
            body += [f"`{lesson.module}` is not in this version of the package: its parent `{shown}` is shown.", ""]
        body += module_table(files, names)
        page(doc, "\n".join(body) + "\n")
        groups.append(doc)
    rest_files = other_modules(root)
    rest = source_pages(rest_files, "listed with the [other modules](foundations.md)")
    page(
        "source/foundations",
        "\n".join(
            [
                "# Source of the other modules",
                "",
                "The package's modules outside every lesson's package: the foundations (where kernels run, the GPU "
                "table, checks, timing and records), code several lessons share, and the course's tools.",
                "",
                *module_table(rest_files, rest),
            ]
        )
        + "\n",
    )
    groups.append("source/foundations")
    page(
        "source/index",
        "\n".join(
            [
                "# The package's source",
                "",
                "Every module of `gpulab`, grouped by the lesson that builds it.",
                "",
                "```{toctree}",
                ":maxdepth: 1",
                "",
                *[g.split("/", 1)[1] for g in groups],
                "```",
            ]
        )
        + "\n",
    )

    # The README: one page per section; the docs/ pages; the glossary (docs/glossary.md) as a Sphinx glossary.
    sections = readme_sections(readme)
    title, intro = sections[0]
    about = []
    for name, body in sections[1:]:
        doc = f"about/{_slug(name)}"
        page(doc, f"# {name}\n\n{_relink(body, src / 'about', root, src=src)}")
        about.append(doc)
    for path in sorted((root / "docs").glob("*.md")):
        text = _relink(path.read_text(), src / "docs", root, root / "docs", src)
        if path.stem == "glossary":
            text = text.replace("**Glossary.**", "**Glossary.** (also as a [Sphinx glossary](../glossary.md))")
        page(f"docs/{path.stem}", text)
        about.append(f"docs/{path.stem}")
    # Lab notes: every notes/*.md, the history of each kernel family.
    lab_notes = []
    for path in sorted((root / "notes").glob("*.md"), key=lambda p: (p.stem != "index", p.stem)):  # index first
        page(f"notes/{path.stem}", _relink(path.read_text(), src / "notes", root, root / "notes", src))
        lab_notes.append(f"notes/{path.stem}")
    terms = glossary((root / "docs" / "glossary.md").read_text())
    gloss = ["# Glossary", "", "The course's terms, from docs/glossary.md.", "", "```{glossary}"]
    for term, meaning in terms:
        gloss += [term, f"  {meaning}", ""]
    page("glossary", "\n".join(gloss).rstrip() + "\n```\n")

    index = [
        f"# {title}",
        "",
        _relink(intro, src, root, src=src),
        "",
        "The lessons below are the course's executed notebooks, read here without installing anything: each "
        "says which GPU and date its measured results come from, links its exercise notebook and shows the "
        "source of the package modules it builds. To run them, clone the repository and `make lab` "
        "(see [Start here](about/start-here.md)).",
        "",
        "| lesson | exercise | package |",
        "|---|---|---|",
    ]
    for lesson in syllabus:
        index.append(
            f"| [{lesson.id}. {lesson.title}](lessons/{_lesson_doc(lesson, root)}) | "
            f"[exercise](lessons/{lesson.slug}_exercise{'.ipynb' if (root / lesson.exercise).exists() else '.md'}) | "
            f"[`{lesson.module}`](source/lesson-{lesson.id}.md) |"
        )
    index += [
        "",
        "```{toctree}",
        ":caption: Lessons",
        ":maxdepth: 1",
        "",
        *[f"lessons/{lesson.slug}" for lesson in syllabus],
        "```",
        "",
        "```{toctree}",
        ":caption: About the course",
        ":maxdepth: 1",
        "",
        *about,
        "glossary",
        "```",
        "",
        *(["```{toctree}", ":caption: Lab notes", ":maxdepth: 1", "", *lab_notes, "```", ""] if lab_notes else []),
        "```{toctree}",
        ":caption: Package source",
        ":maxdepth: 1",
        "",
        "source/index",
        "```",
    ]
    page("index", "\n".join(index) + "\n")
    # Pages of lessons or modules that are gone are removed; unchanged pages keep their time, so Sphinx rereads less.
    written = {src / d for d in docs}
    for path in sorted(src.rglob("*"), reverse=True):
        if path.is_file() and path.with_suffix("") not in written:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return docs


def mathjax_dir() -> Path:
    """MathJax 3's browser bundle as vendored by the ``django-static-mathjax`` package (no CDN at view time)."""
    import importlib.util

    spec = importlib.util.find_spec("mathjax")
    folder = Path(spec.origin).parent / "static" / "mathjax" / "es5" if spec and spec.origin else None
    if folder is None or not (folder / "tex-mml-chtml.js").exists():
        raise RuntimeError(
            "MathJax is not installed here: the site ships its own copy from the django-static-mathjax package. "
            "Install the book's dependencies: pip install -e '.[book]' (make book does)."
        )
    return folder


def build(out: Path = OUT, src: Path = SRC, root: Path = ROOT, strict: bool = True, jobs: int | str = 1) -> Path:
    """Generate the sources and build the site into ``out`` with Sphinx (``book/conf.py``); return ``out``.
    ``strict``: Sphinx warnings are errors (a broken reference or a missing image fails the build)."""
    from sphinx.cmd.build import build_main

    generate(src, root)
    args = [
        "-b",
        "html",
        "-c",
        str(root / "book"),
        "-j",
        str(jobs),
        "-q",
        str(src),
        str(out),
        "-d",
        str(Path(out).parent / "doctrees"),
    ]
    if strict:
        args[:0] = ["-W", "--keep-going"]
    rc = build_main(args)
    if rc:
        raise SystemExit(f"sphinx-build failed (exit {rc}); see the warnings above.")
    problems = book_offline.site_external_resources(out)
    if problems:
        raise SystemExit("the site would fetch from other hosts:\n" + "\n".join(problems))
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab.course.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(OUT), help=f"the site's folder (default {OUT.relative_to(ROOT)})")
    parser.add_argument("--generate-only", action="store_true", help="write the Sphinx sources only (book/_src)")
    parser.add_argument("--no-strict", action="store_true", help="do not turn Sphinx warnings into errors")
    parser.add_argument("-j", "--jobs", default="1", help="Sphinx's parallel jobs (default 1)")
    args = parser.parse_args(argv)
    if args.generate_only:
        docs = generate()
        print(f"wrote {len(docs)} pages into {SRC}")
        return 0
    out = build(Path(args.out), strict=not args.no_strict, jobs=args.jobs)
    pages = sum(1 for p in out.rglob("*.html") if "_static" not in p.relative_to(out).parts)
    print(f"built {pages} pages into {out}; open {out / 'index.html'} or serve it: python -m http.server -d {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
