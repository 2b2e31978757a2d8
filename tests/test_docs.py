"""The README and docs/ stand alone: every relative link resolves inside the repository,
nothing points outside it, every page is in the site's nav, the API reference covers each
package's ``__all__``, and ``mkdocs build --strict`` (the documentation site) is clean."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# The packages with an API reference page (docs/api/NAME.md), which must cover `__all__`.
API_PACKAGES = [
    "algorithms",
    "collect",
    "config",
    "data",
    "envs",
    "mbrl",
    "networks",
    "replay",
    "testing",
    "trainer",
    "transforms",
]


def nav_pages(nav: list) -> list[str]:
    """The page paths (relative to docs/) a MkDocs nav names, in order."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def lazy_exports_of(init: Path) -> dict[str, str]:
    """The ``{name: module}`` map a package ``__init__`` passes to ``lazy_exports``."""
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_exports":
            return ast.literal_eval(node.args[1])
    raise AssertionError(f"{init} calls no lazy_exports")


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


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


def test_no_page_links_to_the_web():
    """The repository a user clones explains itself: no page sends the reader elsewhere."""
    for page in PAGES:
        web = [target for target in LINK.findall(page.read_text()) if "://" in target]
        assert not web, f"{page.relative_to(ROOT)} links outside the repository: {web}"


def test_no_page_points_to_the_developers_shared_folder():
    for page in PAGES:
        assert "../shared" not in page.read_text(), page.name


def test_the_docs_name_files_that_exist():
    """Paths quoted in backticks in docs/ (examples, tests, modules) exist."""
    for page in sorted(DOCS.rglob("*.md")):
        for path in re.findall(r"`((?:examples|tests|cadence)/[\w/.-]+\.py)`", page.read_text()):
            assert (ROOT / path).exists(), f"{page.name}: {path}"


def test_every_docs_page_is_in_the_nav_and_every_nav_page_exists():
    nav = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
    assert not pages - set(nav), f"pages missing from mkdocs.yml's nav: {sorted(pages - set(nav))}"
    assert not set(nav) - pages, f"nav entries with no page: {sorted(set(nav) - pages)}"
    assert len(nav) == len(set(nav)), "a page is in the nav twice"


def test_the_readme_links_into_the_docs():
    targets = LINK.findall((ROOT / "README.md").read_text())
    assert "docs/index.md" in targets
    assert "docs/getting-started.md" in targets


def test_the_api_reference_documents_every_public_name():
    """Each `__all__` name of a package appears as a ``:::`` entry of its API page, so a
    new export cannot be left out of the reference (mkdocs then checks it resolves)."""
    for package in API_PACKAGES:
        page = (DOCS / "api" / f"{package}.md").read_text()
        entries = set(re.findall(r"^::: ([\w.]+)", page, flags=re.MULTILINE))
        for name, module in lazy_exports_of(ROOT / "cadence" / package / "__init__.py").items():
            owner = module if module.startswith("cadence.") else f"cadence.{package}.{module}"
            path = f"{owner}.{name}"
            assert path in entries, f"docs/api/{package}.md lacks '::: {path}'"
    top = (DOCS / "api" / "index.md").read_text()
    for name in lazy_exports_of(ROOT / "cadence" / "__init__.py"):
        assert f"[`cadence.{name}`]" in top, f"docs/api/index.md lacks cadence.{name}"


def test_mkdocs_build_strict_is_clean(tmp_path):
    """The site builds with no warning: links, nav, mkdocstrings references, docstrings."""
    result = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "data" / "index.html").exists()
    page = (tmp_path / "site" / "api" / "data" / "index.html").read_text()
    assert 'id="cadence.data.time_step.TimeStep"' in page  # rendered from the docstrings
    assert '<span class="gp">&gt;&gt;&gt; </span>' in page  # examples as code (griffe_extension.py)
    for html in (tmp_path / "site" / "api").rglob("*.html"):  # >>> read as Markdown quotes
        assert "<blockquote" not in html.read_text(), f"a docstring example in {html} is not code"
    trainer = (tmp_path / "site" / "api" / "trainer" / "index.html").read_text()
    assert "Env-step budget of the run." in trainer  # a config field's metadata doc


@pytest.mark.parametrize(
    "broken, named",
    [
        ("[the loop](no-such-page.md)", "no-such-page.md"),
        ("[TimeStep][cadence.data.time_step.NoSuchName]", "NoSuchName"),
        ("::: cadence.data.time_step.NoSuchName", "NoSuchName"),
    ],
    ids=["broken-link", "missing-cross-reference", "missing-api-object"],
)
def test_mkdocs_build_strict_fails_on_a_broken_page(tmp_path, broken, named):
    """The same configuration, on one page with a broken link or reference, fails."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    plugin = next(p for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    python = plugin["mkdocstrings"]["handlers"]["python"]
    python["paths"] = [str(ROOT)]
    python["options"]["extensions"] = [f"{DOCS / 'griffe_extension.py'}:CadenceDocstrings"]
    config["nav"] = ["index.md"]
    config["watch"] = [str(ROOT / "cadence")]
    (tmp_path / "docs").mkdir()
    shutil.copy(DOCS / "griffe_extension.py", tmp_path / "docs")
    (tmp_path / "docs" / "index.md").write_text(f"# Broken\n\n{broken}\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    result = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0, result.stderr[-2000:]
    assert named in result.stderr, result.stderr[-2000:]
