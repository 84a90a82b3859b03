"""Sphinx configuration of the course's website (``make book``).

The sources are generated into ``book/_src`` by :mod:`gpulab.course.book` from the syllabus, the executed notebooks
(never re-executed here), the exercises, the README and the package's files; this file only says how to render them.
Everything a page loads ships with the site: the theme's own files and MathJax, copied from an installed package.
"""

import shutil
from pathlib import Path

project = "gpulab"
author = "the gpulab authors"
copyright = "the gpulab authors"

extensions = ["myst_nb"]

# Notebooks are read as committed (executed on CPU); building the site never runs a cell.
nb_execution_mode = "off"
nb_merge_streams = True
# Markdown that cells display (the lessons' claims) is parsed as MyST, so its $...$ math renders like the text cells'.
nb_render_markdown_format = "myst"
nb_ipywidgets_js = {}  # no widgets in the course; myst-nb would otherwise add require.js from a CDN
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3  # the notebooks' [section](#1-the-hierarchy) links resolve
suppress_warnings = ["myst.header"]  # notebooks may start below H1 or skip a level; not an error for the reader

highlight_language = "none"  # README blocks without a language are shown as text; notebook cells say theirs
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = "gpulab: GPU-aware sequence models"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": True,
    "use_repository_button": False,
    "use_fullscreen_button": False,
    "navigation_with_keys": False,
    "home_page_in_toc": True,
}
html_context = {"default_mode": "auto"}  # the theme logs a console error on a first visit without one
html_copy_source = False

# MathJax 3 from the django-static-mathjax package, copied into _static/mathjax after the build (see setup below);
# a relative mathjax_path is relative to _static, so no page asks a CDN for it.
mathjax_path = "mathjax/tex-mml-chtml.js"
mathjax3_config = {"options": {"menuOptions": {"settings": {"assistiveMml": False}}}}

# The MathJax files a page can load: the combined TeX+MathML component, TeX extensions loaded on demand, the CHTML
# fonts, the menu's accessibility modules. SVG output, the speech rule engine's maps and the other bundles are left out.
_MATHJAX_SKIP = ("tex-svg", "mml-svg", "-full", "node-main", "output/svg", "sre/mathmaps")


def _copy_mathjax(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    from gpulab.course.book import mathjax_dir

    source = mathjax_dir()
    target = Path(app.outdir) / "_static" / "mathjax"
    for path in source.rglob("*"):
        rel = path.relative_to(source).as_posix()
        if path.is_file() and not any(s in rel for s in _MATHJAX_SKIP):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / rel)


def setup(app):
    app.connect("build-finished", _copy_mathjax)
