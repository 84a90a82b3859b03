"""The course website is read offline: every script, style, font and image of its pages must come from the site
itself. :func:`external_resources` lists those of one HTML page that would be fetched from another host (links in
prose to papers are fine); :func:`site_external_resources` those of every page and stylesheet of a built site.
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

__all__ = ["external_resources", "site_external_resources"]


class _Resources(html.parser.HTMLParser):
    """Collects the URLs a page loads by itself: scripts, stylesheets, preloads, icons, images, media, frames,
    and url(...) in inline styles."""

    LOADS = {
        "script": ("src",),
        "img": ("src", "srcset"),
        "source": ("src", "srcset"),
        "video": ("src", "poster"),
        "audio": ("src",),
        "iframe": ("src",),
        "embed": ("src",),
        "object": ("data",),
        "input": ("src",),
        "track": ("src",),
        "image": ("href", "xlink:href"),
        "use": ("href", "xlink:href"),
    }
    LINK_LOADS = {
        "stylesheet",
        "preload",
        "modulepreload",
        "icon",
        "shortcut",
        "apple-touch-icon",
        "manifest",
        "prefetch",
        "dns-prefetch",
        "preconnect",
        "mask-icon",
    }

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self._style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        names = self.LOADS.get(tag, ())
        if tag == "link" and set((a.get("rel") or "").lower().split()) & self.LINK_LOADS:
            names = ("href",)
        for name in names:
            value = a.get(name)
            if value:
                self.urls += [part.strip().split(" ")[0] for part in value.split(",")] if "srcset" in name else [value]
        if a.get("style"):
            self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", a["style"])
        self._style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._style = False

    def handle_data(self, data):
        if self._style:
            self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", data) + re.findall(r"@import\s+['\"]([^'\"]+)", data)


def _external(url: str) -> bool:
    url = url.strip()
    return (
        url.startswith("//")
        or bool(re.match(r"^(https?|ftp|wss?):", url, re.I))
        and not re.match(r"^(https?|wss?)://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?(/|$)", url, re.I)
    )


def external_resources(page: str) -> list[str]:
    """The URLs of scripts, styles, fonts, images and frames that ``page`` (HTML text) loads from another host.
    Links a reader may follow (``<a href>``) are not resources and are not listed."""
    if not isinstance(page, str):
        raise TypeError(f"page must be the HTML text of a page (str), got {type(page).__name__}.")
    parser = _Resources()
    parser.feed(page)
    return [u for u in parser.urls if _external(u)]


def site_external_resources(folder: Path) -> list[str]:
    """'file: url' for every resource fetched from another host by a built site's HTML pages and CSS files."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a built site (no such folder); build it first: make book")
    problems = []
    for path in sorted(folder.rglob("*")):
        if path.suffix == ".html":
            urls = external_resources(path.read_text(errors="replace"))
        elif path.suffix == ".css":
            text = path.read_text(errors="replace")
            urls = [
                u
                for u in re.findall(r"url\(\s*['\"]?([^'\")]+)", text)
                + re.findall(r"@import\s+(?:url\()?['\"]([^'\"]+)", text)
                if _external(u)
            ]
        else:
            continue
        problems += [f"{path.relative_to(folder)}: {u}" for u in urls]
    return problems
