"""The documentation: README.md and every page of docs/ stay true to the tree.

* Every relative link and image resolves to a file (or folder) committed to the repository
  (``git ls-files``: ignored folders such as ``results/`` do not count), and every ``#anchor``
  to a heading of its page, with the GitHub-style slugs that MyST also gives the headings
  (``myst_heading_anchors`` in docs/conf.py).
* Every fenced block tagged exactly ``python`` runs: the blocks of one page, in order, as one
  script in a fresh process outside the checkout, so the tutorial cannot rot. Code shown
  without running it (an ONNX runtime, a distributed launch) is written as
  ```` ```{code-block} python ````, which Sphinx renders the same.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from tests.helpers import child_environment

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
TUTORIAL = sorted((DOCS / "tutorial").glob("*.md"))
README_MAX_LINES = 200
HTML_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def parse(page: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(page.read_text())


def inline_tokens(tokens: list[Token]) -> list[Token]:
    return [child for token in tokens for child in (token.children or [])]


def references(page: Path) -> list[str]:
    """Targets of the page's links and images, Markdown and inline HTML alike."""
    tokens = parse(page)
    found = []
    for token in [*tokens, *inline_tokens(tokens)]:
        if token.type == "link_open":
            found.append(str(token.attrs["href"]))
        elif token.type == "image":
            found.append(str(token.attrs["src"]))
        elif token.type in ("html_block", "html_inline"):
            found.extend(HTML_REFERENCE.findall(token.content))
    return found


def slug(title: str) -> str:
    """The anchor GitHub (and MyST) give a heading: lower case, punctuation dropped, '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    tokens = parse(page)
    found: dict[str, int] = {}
    names = set()
    for heading, content in zip(tokens, tokens[1:], strict=False):
        if heading.type != "heading_open":
            continue
        text = "".join(child.content for child in content.children or []
                       if child.type in ("text", "code_inline"))
        name = slug(text)
        count = found.get(name, 0)
        found[name] = count + 1
        names.add(name if count == 0 else f"{name}-{count}")  # GitHub numbers repeats
    return frozenset(names)


@functools.cache
def committed() -> frozenset[str]:
    """Every committed file and every folder that holds one, relative to the repository."""
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
    files = [name for name in listing.split("\0") if name]
    folders = {parent.as_posix() for name in files for parent in Path(name).parents}
    return frozenset(files) | frozenset(folders)


def broken_reference(page: Path, target: str) -> str | None:
    """Why ``target`` (a link on ``page``) does not resolve, or None when it does."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None  # an external address: not checked here (no network in the tests)
    path = unquote(parts.path)
    resolved = (page.parent / path).resolve() if path else page
    try:
        name = relative(resolved)
    except ValueError:
        return f"{target}: outside the repository"
    if name not in committed() and name != ".":
        return f"{target}: {name} is not a committed file or folder"
    if parts.fragment and resolved.suffix == ".md" and parts.fragment not in anchors(resolved):
        return f"{target}: no heading #{parts.fragment} in {name}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=relative)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = [why for target in references(page) if (why := broken_reference(page, target))]
    assert not broken, f"{relative(page)}:\n" + "\n".join(broken)


def test_the_link_check_catches_dead_links_and_anchors() -> None:
    readme = REPO / "README.md"
    assert broken_reference(readme, "docs/index.md") is None
    assert broken_reference(readme, "docs/no-such-page.md") is not None
    assert broken_reference(readme, "docs/index.md#no-such-heading") is not None
    assert broken_reference(readme, "results/bench.md") is not None  # ignored, not committed
    assert broken_reference(readme, "https://pytorch.org/docs") is None


def test_readme_is_the_front_door() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    for command in ("make demo", "make test", "pip install"):
        assert command in text


def python_blocks(page: Path) -> list[tuple[int, str]]:
    """``(first line, code)`` of each block fenced as exactly ``python``."""
    return [(token.map[0] + 2, token.content) for token in parse(page)
            if token.type == "fence" and token.info.strip() == "python"]


def script_of(page: Path) -> str:
    """The page's python blocks as one script, each introduced by where it comes from."""
    return "\n".join(f"# {relative(page)}:{line}\n{code}" for line, code in python_blocks(page))


def test_every_tutorial_page_has_code_that_runs() -> None:
    assert TUTORIAL, "docs/tutorial/ has no pages"
    without = [relative(page) for page in TUTORIAL if page.name != "index.md"
               and not python_blocks(page)]
    assert not without


@pytest.mark.parametrize("page", [page for page in PAGES if python_blocks(page)], ids=relative)
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    script = tmp_path / "page.py"
    script.write_text(script_of(page))
    # The page's own settings only: none inherited from the caller (EML_OPS_BACKEND, say).
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=child_environment(),
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        f"{relative(page)}: its python blocks failed\n{result.stdout}\n{result.stderr}")
