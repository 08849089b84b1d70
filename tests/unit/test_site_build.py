"""The site build from the real catalog: deterministic bytes, the export's JSON beside the pages,
every page linking its JSON, no host paths, and bad output folders refused with nothing lost."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recipekit.catalog import list_recipes


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from recipekit.site.build import build_site

    out = tmp_path_factory.mktemp("b") / "site"
    report = build_site(out)
    return out, report


def test_build_is_byte_identical_across_runs(built, tmp_path, run_cli):
    out, _ = built
    again = tmp_path / "again"
    code, stdout, stderr = run_cli("site", "--out", str(again), "--format", "json")
    assert code == 0, stderr
    report = json.loads(stdout)
    assert report["recipes"] == sorted(lr.id for lr in list_recipes())
    first, second = _files(out), _files(again)
    assert sorted(first) == sorted(second)
    for rel in first:
        assert first[rel] == second[rel], f"{rel} differs between two builds"
    # rebuilding into the same folder replaces it whole, same bytes
    code, _, stderr = run_cli("site", "--out", str(again))
    assert code == 0, stderr
    assert _files(again) == second


def test_json_api_beside_the_pages_is_the_export(built, tmp_path):
    from recipekit.export import export

    out, report = built
    written = export(tmp_path / "api-only")
    assert sorted(written) == report.json_files
    for rel in written:
        assert (out / rel).read_bytes() == (tmp_path / "api-only" / rel).read_bytes(), rel


def test_every_page_links_its_json_and_assets_are_local(built):
    out, report = built
    ids = [lr.id for lr in list_recipes()]
    assert report.recipe_ids == sorted(ids)
    for rid in ids:
        page = (out / "recipes" / rid / "index.html").read_text()
        assert f'href="../../api/v1/recipes/{rid}.json"' in page
        # built without --base-url: the agent box shows a placeholder a reader sees must be replaced
        assert (
            f'curl -fsSL <span data-abs-href="../../api/v1/recipes/{rid}.json">https://YOUR-SITE-URL/api/v1/recipes/{rid}.json</span>'
            in page
        )
        assert (out / "api" / "v1" / "recipes" / f"{rid}.json").is_file()
    index = (out / "index.html").read_text()
    for rid in ids:
        assert f'href="recipes/{rid}/index.html"' in index and f'data-id="{rid}"' in index
    for rel, data in _files(out).items():
        if not rel.endswith((".html", ".css", ".js")):
            continue
        text = data.decode()
        # no network at view time: scripts, images, stylesheets and icons are relative paths
        assets = re.findall(r'\bsrc="([^"]*)"', text) + re.findall(r'<link\b[^>]*\bhref="([^"]*)"', text)
        assert assets or rel.endswith((".css", ".js"))
        for url in assets:
            assert not re.match(r"^([a-z]+:|//)", url), f"{rel}: {url} is not a local asset"
        assert "@import" not in text and "url(" not in text
        # no machine-specific paths (the build folder, the checkout)
        from recipekit.paths import SOURCE_ROOT

        assert str(out) not in text and str(SOURCE_ROOT) not in text


def test_filter_pages_and_static_files(built):
    out, report = built
    from recipekit.site.pages import slug

    recipes = list_recipes()
    for lr in recipes:
        hw = (out / "hardware" / f"{slug(lr.recipe.hardware.accelerator)}.html").read_text()
        assert f'data-id="{lr.id}"' in hw
        be = (out / "backend" / f"{lr.recipe.backend}.html").read_text()
        assert f'data-id="{lr.id}"' in be
        others = [x.id for x in recipes if x.recipe.backend != lr.recipe.backend]
        assert all(f'data-id="{o}"' not in be for o in others)
    for name in ("site.css", "site.js", "favicon.ico"):
        assert (out / name).stat().st_size > 0
    assert (out / "favicon.ico").read_bytes().startswith(b"\x89PNG")


def test_bad_output_folders_are_refused(tmp_path, run_cli):
    foreign = tmp_path / "docs"
    foreign.mkdir()
    (foreign / "keep.md").write_text("mine")
    code, out, err = run_cli("site", "--out", str(foreign))
    assert code == 2
    assert "error[site-out-not-empty]" in err and "hint:" in err
    assert (foreign / "keep.md").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    code, _, err = run_cli("site", "--out", str(afile))
    assert code == 2 and "error[site-out-not-dir]" in err
    code, _, err = run_cli("site", "--no-build")
    assert code == 2 and "error[no-build-needs-serve]" in err


def test_every_built_page_is_accessible(built):
    """Headings in order (one h1, no skipped level), tables with column and row headers, images
    with alt text, a language and a title: on every page of the real catalog."""
    from tests.unit.test_site_pages import _Doc

    out, report = built
    assert report.pages
    for rel in report.pages:
        text = (out / rel).read_text()
        assert text.startswith('<!doctype html>\n<html lang="en">')
        assert re.search(r"<title>[^<]+</title>", text)
        doc = _Doc()
        doc.feed(text)
        levels = [lvl for lvl, _ in doc.headings]
        assert levels and levels[0] == 1 and levels.count(1) == 1, rel
        for prev, cur in zip(levels, levels[1:]):
            assert cur <= prev + 1, f"{rel}: h{prev} followed by h{cur}"
        for t in doc.tables:
            assert t["thead"] and all(cell == ("th", "col") for cell in t["thead"][0]), rel
            assert all(row[0] == ("th", "row") for row in t["rows"]), rel
        for img in doc.imgs:
            assert len(img.get("alt") or "") > 20, f"{rel}: {img}"
        ids = re.findall(r'\bid="([^"]+)"', text)
        assert len(ids) == len(set(ids)), f"{rel}: duplicate ids"
        for ref in re.findall(r'aria-labelledby="([^"]+)"', text) + re.findall(r'data-copy-target="([^"]+)"', text):
            assert ref in ids, f"{rel}: {ref} points at no element"
    plots = [p for p in report.plots]
    assert plots, "the catalog publishes results: there are plots"


def test_a_failing_build_leaves_the_previous_site_whole(built, tmp_path):
    """A recipe whose render is refused (a violated constraint) stops the build; the site that
    was there is untouched and no temp folder is left behind."""
    import copy
    import shutil

    from recipekit.catalog import LoadedRecipe, content_hash, load_recipe
    from recipekit.errors import RecipekitError
    from recipekit.schema import Recipe
    from recipekit.site.build import build_site

    out, _ = built
    site = tmp_path / "site"
    shutil.copytree(out, site)
    before = _files(site)
    base = load_recipe("tiny-deepseek-cpu")
    data = copy.deepcopy(base.recipe.model_dump(mode="json", by_alias=True, exclude_unset=True))
    data["settings"]["HOST"]["value"] = "0.0.0.0"  # violates the recipe's loopback-only rule
    rec = Recipe.model_validate(data)
    bad = LoadedRecipe(recipe=rec, origin=base.origin, content_hash=content_hash(rec))
    with pytest.raises(RecipekitError) as err:
        build_site(site, recipes=[bad])
    assert "loopback-only" in str(err.value)
    assert _files(site) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_site_is_readable_by_other_users(built):
    """A web server running as another user can traverse every folder and read every file."""
    out, _ = built
    for p in [out, *out.rglob("*")]:
        mode = p.stat().st_mode & 0o777
        want = 0o755 if p.is_dir() else 0o644
        assert mode & want == want, f"{p.relative_to(out.parent)} has mode {oct(mode)}"
