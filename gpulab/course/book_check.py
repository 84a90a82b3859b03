"""The built website read as a reader would: every page opened in headless Chromium, offline.

:func:`check_site` serves a built site (``make book``) on localhost, opens every HTML page in Debian's Chromium driven
by Playwright (no browser download: ``executable_path`` is the system's Chromium), blocks every request that leaves
localhost, and returns one line per problem it sees:

- a request to another host (a script, style, font or image the site does not ship), a failed or 4xx/5xx request;
- an internal link whose page or file is missing, or whose ``#anchor`` is not on the target page;
- an image that does not load (``naturalWidth == 0``);
- math left as TeX: a page whose math elements MathJax did not render, or raw ``$$``, ``\\(``, ``\\[`` or a
  ``$...\\command...$`` left in its text (code excepted);
- a console error or an uncaught exception, a notebook error output (a traceback), a Sphinx/docutils error box.

Screenshots of the first two failing pages are written to ``screenshots`` when it is given.
``python -m gpulab.course.book_check [SITE]`` runs it on ``book/_build/html`` and exits 1 on any problem.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

__all__ = ["CHROMIUM_FLAGS", "find_chromium", "serve", "check_site", "main"]

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}


def find_chromium() -> str | None:
    """The Chromium to drive: ``$GPULAB_CHROMIUM``, else chromium / chromium-browser on PATH; None if none."""
    env = os.environ.get("GPULAB_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # one line per request would bury the report
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the browser dropped a request it no longer needs
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(folder):
    """Serve ``folder`` on 127.0.0.1 at a free port in a thread; yields the base URL ('http://127.0.0.1:PORT/')."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a built site (no such folder); build it first: make book")
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# Run in the page after it loaded: wait for MathJax, make lazy images load, then report what the page shows.
_INSPECT = """async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await Promise.race([MathJax.startup.promise, new Promise(r => setTimeout(r, 15000))]);
  }
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => (i.complete ? Promise.resolve() : i.decode()).catch(() => null)));
  const textOf = (root) => {
    const clone = root.cloneNode(true);
    clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight').forEach(e => e.remove());
    return clone.textContent;
  };
  const main = document.querySelector('main') || document.body;
  const math = document.querySelectorAll('.math, span.math, div.math');
  const outputs = Array.from(document.querySelectorAll('.cell_output .output, .output'));
  return {
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.getAttribute('name')),
    images: imgs.map(i => ({src: i.currentSrc || i.src, ok: i.complete && i.naturalWidth > 0})),
    math: math.length,
    rendered: document.querySelectorAll('mjx-container, .katex').length,
    mathjax: !!(window.MathJax && MathJax.version),
    text: textOf(main),
    tracebacks: outputs.filter(o => o.classList.contains('traceback') ||
                 /Traceback \\(most recent call last\\)/.test(o.textContent) ||
                 (o.classList.contains('stderr') && /\\b\\w*Error\\b/.test(o.textContent)))
                 .map(o => o.textContent.trim().slice(0, 160)),
    errors: Array.from(document.querySelectorAll('.system-message, .problematic'))
                 .map(e => e.textContent.trim().slice(0, 160)),
  };
}"""

_RAW_TEX = [("$$", "raw $$"), ("\\(", "raw \\("), ("\\[", "raw \\[")]


def _raw_math(text: str) -> list[str]:
    """TeX that MathJax left as text: $$, \\( or \\[ delimiters, or $...$ holding a backslash command."""
    import re

    found = [label for token, label in _RAW_TEX if token in text]
    m = re.search(r"\$[^$\n]{0,200}?\\[A-Za-z]+[^$\n]{0,200}?\$", text)
    if m:
        found.append(f"unrendered TeX {m.group(0)[:60]!r}")
    return found


def redirect_target(html: str) -> str | None:
    """The address a page sends the browser on to (``<meta http-equiv="refresh" content="0; url=...">``), or None.
    Such a page (an old lesson's address) is checked by what it links, not opened: it leaves before it can be read."""
    import re

    if not isinstance(html, str):
        raise TypeError(f"html must be a page's text (str), got {type(html).__name__}.")
    m = re.search(r"""<meta\s+http-equiv=["']refresh["']\s+content=["'][^"';]*;\s*url=([^"']+)["']""", html, re.I)
    return m.group(1).strip() if m else None


def _pages(folder: Path) -> list[str]:
    """The site's pages: its HTML files, except the theme's template fragments copied into _static/."""
    found = (p.relative_to(folder).as_posix() for p in folder.rglob("*.html"))
    return sorted(p for p in found if not p.startswith("_static/"))


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


def check_site(folder, chromium: str | None = None, screenshots=None, pages: list[str] | None = None) -> list[str]:
    """Open every HTML page of the built site ``folder`` (or the given ``pages``, paths relative to it) in headless
    Chromium with every non-localhost request blocked; return the problems found, one line each (empty: all good).

    ``chromium``: the browser's path (default :func:`find_chromium`); ``screenshots``: a folder for PNGs of the first
    two failing pages. A RuntimeError if no Chromium or no Playwright is installed."""
    folder = Path(folder)
    chromium = chromium or find_chromium()
    if chromium is None:
        raise RuntimeError("no Chromium here: apt-get install chromium (or set GPULAB_CHROMIUM to its path).")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        raise RuntimeError("Playwright is not installed: pip install -e '.[book]'.") from e
    pages = _pages(folder) if pages is None else list(pages)
    if not pages:
        raise FileNotFoundError(f"no HTML pages in {folder}; build the site first: make book")
    problems: list[str] = []
    shots = 0
    seen_links: dict[str, set[str]] = {}  # page -> internal links on it
    ids: dict[str, set[str]] = {}  # url without fragment -> ids on that page
    with serve(folder) as base, tempfile.TemporaryDirectory(prefix="gpulab-chromium-") as profile:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=chromium,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1280, "height": 900},
            )
            page_problems: list[str] = []

            def route(r):
                host = urllib.parse.urlsplit(r.request.url).hostname or ""
                if r.request.url.startswith(base) or host in _LOCAL_HOSTS:
                    r.continue_()
                else:
                    page_problems.append(f"request to another host blocked: {r.request.url}")
                    r.abort()

            context.route("**/*", route)

            def watch(page):
                """A fresh tab per page, so a late event of one page is never charged to the next."""
                page.on("console", lambda m: m.type == "error" and page_problems.append(f"console error: {m.text}"))
                page.on("pageerror", lambda e: page_problems.append(f"uncaught exception: {e}"))
                page.on(
                    "response",
                    lambda r: (
                        r.status >= 400 and page_problems.append(f"HTTP {r.status} for {r.url.replace(base, '/')}")
                    ),
                )
                page.on(
                    "requestfailed",
                    lambda r: (
                        r.url.startswith(base) and page_problems.append(f"request failed: {r.url.replace(base, '/')}")
                    ),
                )
                return page

            for rel in pages:
                html = (folder / rel).read_text(encoding="utf-8", errors="replace")
                target = redirect_target(html)
                if target is not None:  # a moved page: its target must be a page of the site, and it must link it
                    dest = (folder / rel).parent / urllib.parse.urlsplit(target).path
                    if not dest.is_file():
                        problems.append(f"{rel}: redirects to {target}, which is no page of the site")
                    elif f'href="{target}"' not in html:
                        problems.append(f"{rel}: redirects to {target} without a link to it on the page")
                    continue
                page_problems.clear()
                page = watch(context.new_page())
                url = urllib.parse.urljoin(base, urllib.parse.quote(rel))
                try:
                    response = page.goto(url, wait_until="load", timeout=60_000)
                    if response is None or response.status >= 400:
                        page_problems.append(f"page answers {response.status if response else 'nothing'}")
                    info = page.evaluate(_INSPECT)
                except Exception as e:  # noqa: BLE001 - a page that cannot be opened is a problem to report
                    page_problems.append(f"could not open: {e}")
                    info = None
                if info is not None:
                    ids[url] = set(info["ids"])
                    seen_links[url] = {h for h in info["links"] if h.startswith(base)}
                    for img in info["images"]:
                        if not img["ok"]:
                            page_problems.append(f"image does not load: {img['src'].replace(base, '/')}")
                    if info["math"] and (not info["mathjax"] or info["rendered"] < info["math"]):
                        page_problems.append(
                            f"math not rendered: {info['rendered']} of {info['math']} math elements"
                            + ("" if info["mathjax"] else " (MathJax not loaded)")
                        )
                    page_problems += [f"math left as text: {x}" for x in _raw_math(info["text"])]
                    page_problems += [f"error output in the page: {t!r}" for t in info["tracebacks"]]
                    page_problems += [f"build error shown on the page: {t!r}" for t in info["errors"]]
                if page_problems:
                    problems += [f"{rel}: {p}" for p in dict.fromkeys(page_problems)]
                    if screenshots is not None and shots < 2:
                        Path(screenshots).mkdir(parents=True, exist_ok=True)
                        with contextlib.suppress(Exception):
                            page.screenshot(path=str(Path(screenshots) / f"failure-{shots + 1}.png"), full_page=False)
                            shots += 1
                page.close()
            context.close()
        # Internal links: every target exists, and an #anchor is on the page it names.
        status: dict[str, int] = {}
        for source, links in seen_links.items():
            rel = source.replace(base, "")
            for link in sorted(links):
                target, _, anchor = link.partition("#")
                if target in ids:  # a page the crawl opened
                    code = 200
                else:
                    code = status[target] = status[target] if target in status else _status(target)
                if code >= 400 or code == 0:
                    problems.append(f"{rel}: broken link to {target.replace(base, '/')} (HTTP {code or 'no answer'})")
                elif anchor and target in ids and urllib.parse.unquote(anchor) not in ids[target]:
                    problems.append(f"{rel}: link to a missing anchor {link.replace(base, '/')}")
    return problems


def main(argv: list[str] | None = None) -> int:
    from gpulab.course.book import OUT

    parser = argparse.ArgumentParser(prog="python -m gpulab.course.book_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default=str(OUT), help="the built site (default book/_build/html)")
    parser.add_argument("--screenshots", default=str(Path(OUT).parent / "failures"), help="where failing pages go")
    args = parser.parse_args(argv)
    problems = check_site(args.site, screenshots=args.screenshots)
    for p in problems:
        print(p)
    n = len(_pages(Path(args.site)))
    print(
        f"{n} pages checked in Chromium: {len(problems)} problems"
        + (f"; screenshots in {args.screenshots}" if problems else "")
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
