"""Every file the README cites exists in the repository, and every in-page link has its heading."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
TOP = ("recipekit/", "backends/", "bench/", "hybrid/", "patches/", "tools/", "recipes/", "tests/")


def _anchor(heading: str) -> str:
    """GitHub's heading slug: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_markdown_links_point_at_files_or_headings_that_exist():
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert links
    for target in links:
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            assert target[1:] in anchors, f"no heading for {target}"
        else:
            assert (ROOT / target.split("#")[0]).exists(), f"README links {target}, which is not in the repository"


def test_cited_repository_paths_exist():
    cited = set()
    for code in re.findall(r"`([^`\n]+)`", README):
        for word in code.split():
            word = word.strip("(),;:'\"")
            if word.startswith(TOP) and not any(c in word for c in "<>{}*$"):
                cited.add(word.split(":")[0].split("#")[0])
    assert len(cited) > 20
    missing = sorted(p for p in cited if not (ROOT / p).exists())
    assert not missing, f"the README cites paths that are not in the repository: {missing}"


def test_no_citation_of_notes_outside_the_repository():
    assert not re.search(r"\bresearch/[\w-]+\.md", README)
    assert "DESIGN.md" not in README
