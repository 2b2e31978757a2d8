"""The README and docs/ stand alone: every relative link resolves inside the repository,
and nothing points outside it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_relative_link_resolves_inside_the_repository():
    checked = 0
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            path = (page.parent / target).resolve()
            assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
            assert path.exists(), f"{page.name} links to a missing file: {target}"
            checked += 1
    assert checked >= 5


def test_no_page_points_to_the_developers_shared_folder():
    for page in PAGES:
        assert "../shared" not in page.read_text(), page.name


def test_the_docs_name_files_that_exist():
    """Paths quoted in backticks in docs/ (examples, tests, modules) exist."""
    for page in sorted((ROOT / "docs").glob("*.md")):
        for path in re.findall(r"`((?:examples|tests|cadence)/[\w/.-]+\.py)`", page.read_text()):
            assert (ROOT / path).exists(), f"{page.name}: {path}"
