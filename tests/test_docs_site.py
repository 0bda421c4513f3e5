"""The built documentation site works offline and reads as the project's: no page loads a script,
a style sheet, a font or an image from another host (MathJax and its fonts are served by the site),
opened from disk (``file://``) every link reaches a page, not a folder, and every page is reached
from the navigation, search needs no server, docstrings' Sphinx roles are rendered as code, and no
page speaks of the people who wrote it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

import pytest
import yaml

ROOT = Path(__file__).parents[1]
#: A tag that makes the browser fetch something: a script, a style sheet, a font, an image, a frame.
FETCHED = re.compile(
    r"<(?:script|link|img|iframe|source|embed|object)\b[^>]*\b(?:src|href|data)=\"(https?:)?//", re.I
)
CSS_REMOTE = re.compile(r"(?:url\(\s*['\"]?|@import\s+['\"])(?:https?:)?//", re.I)
ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`?<code>")
#: What the project's pages never name: the sessions, issues and files outside the repository.
FOREIGN = re.compile(r"\bthis session\b|\bsessions?\b|\bissue #?\d+|DESIGN\.md|STYLE\.md|\.\./shared", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    if not (ROOT / "docs/javascripts/mathjax/tex-mml-chtml.js").is_file() and shutil.which("npm") is None:
        pytest.skip("MathJax is not vendored yet and npm is missing (make docs fetches it)")
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_no_page_loads_anything_from_another_host(site: Path) -> None:
    pages = list(site.rglob("*.html"))
    assert len(pages) > 10
    remote = [
        f"{p.relative_to(site)}: {m.group(0)[:120]}" for p in pages for m in FETCHED.finditer(p.read_text())
    ]
    assert not remote, remote[:5]
    styles = [p for p in site.rglob("*.css") if CSS_REMOTE.search(p.read_text(errors="replace"))]
    assert not styles, styles[:5]


def test_formulas_are_typeset_by_the_sites_own_mathjax(site: Path) -> None:
    page = (site / "concepts/sheaf.html").read_text()
    assert "arithmatex" in page and 'src="../javascripts/mathjax/tex-mml-chtml.js"' in page
    assert (site / "javascripts/mathjax/tex-mml-chtml.js").stat().st_size > 100_000
    assert len(list((site / "javascripts/mathjax/output/chtml/fonts/woff-v2").glob("*.woff"))) > 10


def test_the_api_page_lists_federation_and_load_and_no_role_shows_as_text(site: Path) -> None:
    api = (site / "reference/api.html").read_text()
    for name in ("sheaf_fmtl.api.Federation", "sheaf_fmtl.export.load", "sheaf_fmtl.export.TrainedRun"):
        assert f'id="{name}"' in api, name
    shown = [p.relative_to(site) for p in site.rglob("*.html") if ROLE.search(p.read_text())]
    assert not shown, shown[:5]


def test_no_page_names_sessions_issues_or_files_outside_the_repository(site: Path) -> None:
    named = []  # the built pages: the snippets they include (benchmarks/README.md) too
    for page in site.rglob("*.html"):
        named += [f"{page.relative_to(site)}: {m.group(0)}" for m in FOREIGN.finditer(page.read_text())]
    assert not named, named[:10]


def test_the_own_models_guide_is_linked_from_the_readme_and_the_home_page() -> None:
    assert "(docs/guide/own-models.md)" in (ROOT / "README.md").read_text()
    assert "(guide/own-models.md)" in (ROOT / "docs/index.md").read_text()


def test_the_results_page_answers_which_coupling_on_its_first_screen() -> None:
    lines = (ROOT / "docs/results.md").read_text().splitlines()
    top = lines[: next(i for i, line in enumerate(lines) if line.startswith("## Full tables"))]
    assert len(top) < 60
    headers = [line for line in top if line.startswith("| method |")]
    assert len(headers) == 3  # School, Vehicle, R-MNIST
    assert all("seeds" in h and "where measured" in h and "bits" in h and "memory" in h for h in headers)
    assert "measured\non an NVIDIA H100 at commit 7aa3fbc" in "\n".join(top)
    assert any("NVIDIA H100, commit 7aa3fbc" in line and "92.62" in line for line in top)  # dFedU, 3 seeds


class _Page(HTMLParser):
    """A page's links (``a``, ``link``, ``script``, ``img``) and the ids it defines."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        key = {"a": "href", "link": "href", "script": "src", "img": "src"}.get(tag)
        if key and found.get(key):
            self.links.append(str(found[key]))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def crawl(start: Path) -> tuple[set[Path], list[str]]:
    """From ``start``, follow every link as a browser does from ``file://``: the pages reached, and
    the links that reach no file (a folder shows a listing there) or an anchor the page lacks."""
    seen: set[Path] = set()
    broken: list[str] = []
    queue = [start.resolve()]
    pages: dict[Path, _Page] = {}
    while queue:
        page = queue.pop()
        if page in seen:
            continue
        seen.add(page)
        pages[page] = pages.get(page) or _parse(page)
        for link in pages[page].links:
            url = urljoin(page.as_uri(), link)
            parts = urlsplit(url)
            if parts.scheme != "file":
                continue  # another host: the test above refuses those that load anything
            target = Path(url2pathname(unquote(parts.path)))
            if not target.is_file():
                broken.append(f"{page.name}: {link} ({'a folder' if target.is_dir() else 'missing'})")
                continue
            if target.suffix == ".html":
                if parts.fragment:
                    pages[target] = pages.get(target) or _parse(target)
                    if unquote(parts.fragment) not in pages[target].ids:
                        broken.append(f"{page.name}: {link} (no such anchor)")
                queue.append(target)
    return seen, broken


def test_from_disk_every_link_reaches_a_page_and_the_navigation_reaches_every_page(site: Path) -> None:
    seen, broken = crawl(site / "index.html")
    assert not broken, broken[:10]
    pages = {p.resolve() for p in site.rglob("*.html") if p.name != "404.html"}
    assert pages - seen == set(), sorted(str(p.relative_to(site)) for p in pages - seen)[:10]
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    assert len(seen) == len(nav) and all((site / p).with_suffix(".html").resolve() in seen for p in nav)


def _nav_pages(entry: object) -> list[str]:
    """The ``.md`` files ``mkdocs.yml``'s ``nav`` names."""
    if isinstance(entry, str):
        return [entry] if entry.endswith(".md") else []
    items = entry.values() if isinstance(entry, dict) else entry if isinstance(entry, list) else []
    return [p for item in items for p in _nav_pages(item)]


def test_search_works_from_disk_and_the_build_files_are_not_published(site: Path) -> None:
    index = (site / "search" / "search_index.js").read_text()
    assert index.startswith("var __index = {") and '"location":"guide/running.html' in index
    assert 'src="javascripts/iframe-worker/shim.js"' in (site / "index.html").read_text()
    assert not (site / "hooks.py").exists() and not list(site.rglob("aggregate.md"))
