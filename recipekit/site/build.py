"""Build the static site: index, one page per recipe, bench plots, and the export's JSON API.

Every page is generated from the catalog at build time, so no page can drift from the data:
the launch blocks are the text `recipe render` prints, and the JSON beside each page is the
export's document. Output is deterministic (sorted, no dates or absolute paths) and needs no
network at view time (one local stylesheet and script).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from recipekit.site import plots as plotting
from recipekit.site.icon import favicon_png
from recipekit.site.pages import Launch, filters, index_item, recipe_page, slug
from recipekit.site.writer import SiteDir
from recipekit.paths import catalog_dir
from recipekit.catalog import list_recipes
from recipekit import __version__
from recipekit import __version__

API_PREFIX = "api/v1"
STATIC_FILES = ("site.css", "site.js")
# Shown in the agent box of a site built without --base-url (the page script puts the real address in
# when it runs; a reader of the raw HTML sees where to put theirs).
SITE_URL_PLACEHOLDER = "https://YOUR-SITE-URL/"


@dataclass
class SiteReport:
    out_dir: Path
    recipe_ids: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    json_files: list[str] = field(default_factory=list)

    @property
    def page_count(self) -> int:
        return len(self.pages)

    @property
    def plot_count(self) -> int:
        return len(self.plots)

    @property
    def json_count(self) -> int:
        return len(self.json_files)

    def to_dict(self) -> dict:
        return {"out_dir": str(self.out_dir), "recipes": self.recipe_ids, "pages": self.pages,
                "plots": self.plots, "json": self.json_files}


def recipe_href(recipe_id: str) -> str:
    return f"recipes/{recipe_id}/index.html"


def json_href(recipe_id: str) -> str:
    return f"{API_PREFIX}/recipes/{recipe_id}.json"


def _environment():
    import jinja2  # lazy: pulls jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("recipekit.site", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined, trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
    return env


def _static(name: str) -> bytes:
    return resources.files("recipekit.site").joinpath("static").joinpath(name).read_bytes()


def _source_path(loaded) -> str:
    """The recipe file relative to the catalog root (never an absolute, machine-specific path)."""

    try:
        rel = Path(loaded.origin).resolve().relative_to(catalog_dir().resolve())
    except (ValueError, OSError):
        return ""
    return f"recipes/{rel.as_posix()}"


def build_site(out_dir: Path | str, *, recipes: Optional[list] = None, base_url: Optional[str] = None) -> SiteReport:
    """Write the whole site into `out_dir` (replaced all at once). `recipes` defaults to the catalog."""
    from recipekit.site import sources  # lazy: pulls pydantic, pydantic_core

    loaded = sorted(recipes if recipes is not None else list_recipes(), key=lambda lr: lr.id)
    base = (base_url.rstrip("/") + "/") if base_url else ""
    env = _environment()
    report = SiteReport(out_dir=Path(out_dir))
    common = {"toolkit_version": __version__, "recipe_count": len(loaded), "description": ""}

    with SiteDir(Path(out_dir)) as site:
        report.json_files = sources.export_api(site.root, loaded)
        items = []
        for lr in loaded:
            rid = lr.id
            html, plots = render_recipe_page(lr, sources.launch_texts(lr), base_url=base, env=env, common=common)
            for plot in plots:
                site.write(f"recipes/{rid}/{plot.filename}", plot.png)
                report.plots.append(f"recipes/{rid}/{plot.filename}")
            site.write(recipe_href(rid), html)
            report.pages.append(recipe_href(rid))
            report.recipe_ids.append(rid)
            items.append(index_item(lr, recipe_href(rid), json_href(rid)))

        index_tpl = env.get_template("index.html.j2")
        flt = filters(items)
        site.write("index.html", index_tpl.render(items=items, filters=flt, filter_label="", root="",
                                                  heading="Recipes", title="All recipes", **common))
        report.pages.append("index.html")
        for f in flt:
            key = "hardware_key" if f["name"] == "hardware" else "backend"
            for opt in f["options"]:
                subset = [it for it in items if it[key] == opt["value"]]
                label = f"{f['label']}: {opt['label']}"
                site.write(opt["page"], index_tpl.render(items=subset, filters=flt, filter_label=label, root="../",
                                                         heading=f"Recipes for {opt['label']}", title=label, **common))
                report.pages.append(opt["page"])
        for name in STATIC_FILES:
            site.write(name, _static(name))
        icon = favicon_png()
        site.write("favicon.ico", icon)
        site.write("favicon.png", icon)
        site.commit()
    return report


def render_recipe_page(lr, launch_texts: list, *, base_url: str = "", env=None,
                       common: Optional[dict] = None) -> tuple[str, list]:
    """The HTML of one recipe page and its plots (each with `.png` bytes set).

    `launch_texts` is [(layout or None, text)], the output of `recipe render` per layout.
    """

    env = env or _environment()
    common = common or {"toolkit_version": __version__, "recipe_count": 1}
    rid = lr.id
    root = "../../"
    launches = [Launch(layout=layout or "default", slug=slug(layout or "default"), title=_launch_title(lr, layout),
                       text=text, description=_layout_doc(lr, layout)) for layout, text in launch_texts]
    page, plots = recipe_page(lr, launches, json_href=root + json_href(rid),
                              json_url=(base_url or SITE_URL_PLACEHOLDER) + json_href(rid),
                              source_path=_source_path(lr))
    for plot in plots:
        plot.png = plotting.render_png(plot.chart)
        plot.src, plot.alt = plot.filename, plot.chart.alt_text()
        plot.width, plot.height = plotting.pixel_size()
    html = env.get_template("recipe.html.j2").render(
        p=page, root=root, title=lr.recipe.title, **{**common, "description": page.summary[:300]})
    return html, plots


def _launch_title(lr, layout: Optional[str]) -> str:
    r = lr.recipe
    if not layout:
        return "Shell"
    default = " (default)" if layout == r.default_layout else ""
    return f"Layout {layout}{default}"


def _layout_doc(lr, layout: Optional[str]) -> str:
    if not layout or layout not in lr.recipe.layouts:
        return ""
    lay = lr.recipe.layouts[layout]
    return " ".join(lay.doc.split())
