"""The page model: what each section of a recipe page shows, derived from the recipe's data.

Everything here is presentation of fields the schema holds (no model or hardware knowledge):
a section is present exactly when the recipe has data for it. The templates only lay it out.
"""
from __future__ import annotations

import re
import textwrap
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

from recipekit.site.plots import BarChart, Series

STATUS_NOTES = {
    "verified": "Verified end to end on the target hardware; see the checks below.",
    "community": "Community submission — verify on your own hardware.",
    "experimental": "Experimental — not verified end to end.",
    "local": "Runs on any machine: the embedded local default.",
}

METRIC_LABELS = {
    "decode_tps_per_stream": "Decode per stream",
    "decode_tps_aggregate": "Decode aggregate",
    "decode_tps": "Decode",
    "prefill_tps": "Prefill",
    "cold_prefill_tps": "Cold prefill",
    "ttft_s": "First token",
    "ppl": "Perplexity",
    "perplexity": "Perplexity",
    "kv_pool_tokens": "KV pool",
    "prefill_tps_cold": "Cold prefill",
    "ttft_cold_s": "Cold first token",
    "soak_tps_mean": "Soak mean",
    "weights_load_min": "Weights load",
    "warmup_s": "Warm-up",
    "humaneval": "HumanEval",
    "gsm8k": "GSM8K",
}

DIMENSIONS = (("layout", "Layout"), ("streams", "Streams"), ("context", "Context"), ("prompt_type", "Prompt"))


def slug(text: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "x"


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric.replace("_", " ").strip().capitalize())


def fmt_num(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == int(v) and abs(v) >= 1000:
            return f"{int(v):,}"
        return f"{v:,.6g}" if abs(v) < 1000 else f"{v:,.1f}"
    return str(v)


def fmt_value(v: Any, unit: str = "") -> str:
    text = fmt_num(v)
    return f"{text} {unit}".strip() if unit else text


def fmt_tokens(n: Optional[int]) -> Optional[str]:
    return None if n is None else f"{n:,} tokens"


def argv_text(argv: list[str]) -> str:
    """An argv template shown as one command line (quoted only where a word has spaces)."""
    out = []
    for word in argv:
        out.append(f"'{word}'" if (not word or re.search(r"\s", word)) and "'" not in word else word)
    return " ".join(out)


def paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text or "") if p.strip()]


# --------------------------------------------------------------------------- tables

@dataclass
class Column:
    label: str
    num: bool = False


@dataclass
class Table:
    columns: list[Column]
    rows: list[list[str]]
    caption: str = ""


# --------------------------------------------------------------------------- guide

def parse_guide(text: str) -> dict:
    """Split the recipe's guide text (Markdown, parsed by markdown-it-py's CommonMark parser) into
    ordered blocks: intro blocks, then titled sections.

    A heading opens a section; a fenced or indented code block, or a paragraph whose lines all
    start with '$ ', is a command ({"cmd": text}); every other block is prose ({"p": text}, its
    lines joined). Inline markup and raw HTML stay text: the templates escape every block.
    """
    from markdown_it import MarkdownIt  # lazy: pulls markdown_it

    src = text or ""
    lines = src.splitlines()
    intro: list[dict] = []
    sections: list[dict] = []
    blocks = intro

    def add(kind: str, value: str) -> None:
        if value.strip():
            blocks.append({kind: value})

    tokens = MarkdownIt("commonmark").parse(src)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.level != 0 or tok.nesting == -1:
            i += 1
            continue
        if tok.type == "heading_open":
            blocks = []
            sections.append({"title": " ".join(tokens[i + 1].content.split()), "blocks": blocks})
        elif tok.type in ("fence", "code_block"):
            add("cmd", textwrap.dedent(tok.content).strip("\n"))
        elif tok.type == "paragraph_open" and all(ln.startswith("$ ") for ln in tokens[i + 1].content.splitlines()):
            add("cmd", "\n".join(ln[2:] for ln in tokens[i + 1].content.splitlines()))
        elif tok.map:                     # a paragraph, list, quote, ...: its source lines as prose
            add("p", " ".join(" ".join(ln.strip() for ln in lines[tok.map[0]:tok.map[1]]).split()))
        i += 1
    return {"intro": intro, "sections": sections}


# --------------------------------------------------------------------------- the page

@dataclass
class Launch:
    layout: str
    slug: str
    title: str
    text: str
    description: str = ""


@dataclass
class Plot:
    filename: str
    chart: BarChart
    caption: str
    src: str = ""
    alt: str = ""
    width: int = 0
    height: int = 0
    png: bytes = b""


@dataclass
class RecipePage:
    """Everything a recipe page shows; `sections()` names the ones present (for tests)."""
    id: str
    title: str
    org: str
    status: str
    status_note: str
    summary: str
    description: str
    tags: list[str]
    meta_line: str
    json_href: str
    json_url: str
    url: Optional[str]
    source_path: str
    glance: list[dict]
    launches: list[Launch]
    launch_note: str
    checks_passed: list[str]
    notes: list[str]
    guide: Optional[dict]
    fixes: Optional[dict]
    verification: Optional[dict]
    performance: list[dict]
    plots: list[Plot]
    known_issues: list[str]
    dont: list[dict]
    env_defaults: Optional[Table]
    components: list[dict]
    install: list[str]
    downloads: Optional[Table]
    placeholders: Optional[Table]
    credits: list[dict]
    revisions: Optional[Table]
    revision_notes: list[str] = field(default_factory=list)

    def sections(self) -> list[str]:
        present = ["launch", "agent"]
        for name, value in (("glance", self.glance), ("checks", self.checks_passed), ("notes", self.notes),
                            ("guide", self.guide), ("fixes", self.fixes), ("verified", self.verification),
                            ("performance", self.performance or self.plots), ("known-issues", self.known_issues),
                            ("what-not-to-do", self.dont), ("env-defaults", self.env_defaults),
                            ("components", self.components), ("install", self.install),
                            ("downloads", self.downloads), ("placeholders", self.placeholders),
                            ("credits", self.credits),
                            ("revisions", self.revisions or self.revision_notes)):
            if value:
                present.append(name)
        return present


def shown(recipe, text: Optional[str]) -> Optional[str]:
    """A template string for display: ${NAME} of a recipe setting shows the setting's default,
    the toolkit's own folders show as their <PLACEHOLDERS> (as `recipe render` writes them)."""
    from recipekit.config import BUILTIN_PLACEHOLDERS  # lazy: pulls pydantic, pydantic_core

    if not text:
        return text

    def sub(m: "re.Match") -> str:
        name = m.group(1)
        if name in BUILTIN_PLACEHOLDERS:
            return BUILTIN_PLACEHOLDERS[name]
        st = recipe.settings.get(name)
        return str(st.value) if st is not None and st.value is not None and not isinstance(st.value, list) \
            else m.group(0)
    for _ in range(5):  # settings may refer to settings; a cycle stops here and stays visible
        new = re.sub(r"\$\{([A-Z][A-Z0-9_]*)\}", sub, text)
        if new == text:
            break
        text = new
    return text


def hardware_label(recipe) -> str:
    hw = recipe.hardware
    return f"{hw.count}× {hw.accelerator}" if hw.count else hw.accelerator


def engine_label(recipe) -> str:
    e = recipe.engine
    return f"{e.name} {e.version}" if e.version else e.name


def layouts_label(recipe) -> str:
    if not recipe.layouts:
        return ""
    parts = []
    for name, lay in recipe.layouts.items():
        dims = [f"TP {lay.tensor_parallel}"] if lay.tensor_parallel > 1 else []
        if lay.pipeline_parallel > 1:
            dims.append(f"PP {lay.pipeline_parallel}")
        if lay.expert_parallel:
            dims.append(f"EP {lay.expert_parallel}")
        default = " (default)" if name == recipe.default_layout else ""
        parts.append(f"{name}{default}" + (f": {' · '.join(dims)}" if dims else ""))
    return "; ".join(parts)


def _serve_arg(recipe, flag: str) -> Optional[str]:
    for a in recipe.serve.args:
        if a.flag == flag and a.value is not None:
            return str(a.value)
    return None


def _glance(recipe) -> list[dict]:
    m, hw, e = recipe.model, recipe.hardware, recipe.engine
    cards = []
    params = " / ".join(x for x in (m.params_total and f"{m.params_total} total",
                                    m.params_active and f"{m.params_active} active") if x)
    arch = ", ".join(x for x in (m.architecture, m.layers and f"{m.layers} layers",
                                 m.routed_experts and f"{m.routed_experts} routed experts"
                                 + (f" (top-{m.experts_per_token})" if m.experts_per_token else "")) if x)
    cards.append({"title": "Model", "value": m.hf_id, "detail": " · ".join(x for x in (params, arch) if x)})
    hw_detail = " · ".join(x for x in (hw.interconnect, hw.power_cap_w and f"{hw.power_cap_w} W cap per card",
                                       hw.memory_gib_per_device and f"{fmt_num(hw.memory_gib_per_device)} GiB each")
                           if x)
    cards.append({"title": "Hardware", "value": hardware_label(recipe), "detail": hw_detail})
    if recipe.layouts:
        cards.append({"title": "Layouts", "value": ", ".join(recipe.layouts), "detail": layouts_label(recipe)})
    eng_detail = shown(recipe, e.image or e.base_image) or ""
    cards.append({"title": "Engine", "value": engine_label(recipe),
                  "detail": " · ".join(x for x in (f"{e.runner} runner", eng_detail) if x)})
    if m.precision or m.size_gb:
        cards.append({"title": "Precision", "value": m.precision or "",
                      "detail": f"{fmt_num(m.size_gb)} GB" if m.size_gb else ""})
    if m.context_served or m.context_native:
        cards.append({"title": "Context", "value": fmt_tokens(m.context_served or m.context_native),
                      "detail": f"{fmt_num(m.context_native)} native" if m.context_native and m.context_served else ""})
    if m.kv_pool_tokens:
        cards.append({"title": "KV pool", "value": fmt_tokens(m.kv_pool_tokens), "detail": "across concurrent requests"})
    if recipe.fixes:
        n = len(recipe.fixes.items) or recipe.fixes.count or 0
        req = sum(1 for f in recipe.fixes.items if f.required and not f.opt_in)
        cards.append({"title": "Fixes", "value": f"profile {recipe.fixes.profile}",
                      "detail": f"{n} fixes" + (f", {req} required" if recipe.fixes.items else "")})
    if recipe.gates:
        cards.append({"title": "Gates", "value": f"{len(recipe.gates)} gates",
                      "detail": ", ".join(g.id for g in recipe.gates)})
    return cards


def _guide(recipe, source_path: str) -> Optional[dict]:
    parsed = parse_guide(recipe.guide)
    m = recipe.model
    facts: list[tuple[str, str]] = []
    if recipe.guide or recipe.checkpoint.pipeline:
        facts.append(("Model", m.hf_id + (f" ({m.license})" if m.license else "")))
        facts.append(("Hardware", hardware_label(recipe) + (f", {layouts_label(recipe)}" if recipe.layouts else "")))
        facts.append(("Engine", engine_label(recipe)
                      + (f", {shown(recipe, recipe.engine.image)}" if recipe.engine.image else "")))
        if m.precision:
            facts.append(("Precision", m.precision))
        if m.context_served or m.context_native:
            ctx = fmt_tokens(m.context_served or m.context_native) or ""   # a count is set: never None here
            if m.context_native and m.context_served:
                ctx += f" served ({fmt_num(m.context_native)} native)"
            facts.append(("Context", ctx))
        seqs = _serve_arg(recipe, "--max-num-seqs")
        if seqs:
            facts.append(("Concurrency", f"--max-num-seqs {seqs}"))
        if source_path:
            facts.append(("Recipe", source_path))
    sections = list(parsed["sections"])
    ck = recipe.checkpoint
    if ck.pipeline:
        blocks = [{"p": p} for p in paragraphs(ck.note)]
        for st in ck.pipeline:
            if st.doc or st.name:
                blocks.append({"p": f"{st.name or st.id}: {' '.join(st.doc.split())}".rstrip(": ")
                               + (f" It must print {st.must_print}." if st.must_print else "")})
            if st.run:
                blocks.append({"cmd": argv_text(st.shown_argv())})
        sections.append({"title": "Checkpoint pipeline (the steps recipe apply runs)", "blocks": blocks})
    b = recipe.engine.build
    if b and (b.dockerfile or b.note):
        cmd = ["docker", "build"] + (["-f", b.dockerfile] if b.dockerfile else [])
        for k, v in b.build_args.items():
            cmd += ["--build-arg", f"{k}={v}"]
        if b.tag:
            cmd += ["-t", b.tag]
        cmd.append(b.context)
        paras = paragraphs(b.note) + ([f"Takes about {b.duration}."] if b.duration else [])
        sections.append({"title": "Image build (the step recipe apply runs)",
                         "blocks": [{"p": p} for p in paras] + [{"cmd": argv_text(cmd)}]})
    if not (parsed["intro"] or sections):
        return None
    return {"intro": parsed["intro"], "facts": facts, "sections": sections}


def _fixes(recipe) -> Optional[dict]:
    fx = recipe.fixes
    if fx is None:
        return None
    intro = []
    head = f"The {fx.profile} profile"
    if fx.applied_at:
        head += f", applied at {fx.applied_at}"
    n = len(fx.items) or fx.count
    if n:
        head += f": {n} fixes this configuration depends on"
    intro.append(head + ".")
    intro += paragraphs(fx.note)
    table = None
    if fx.items:
        rows = [[f.id, "opt-in" if f.opt_in else ("required" if f.required else "recommended"),
                 f.group or "—", f.reason or "—"] for f in fx.items]
        table = Table([Column("Fix"), Column("Status"), Column("Group"), Column("Why")], rows,
                      caption=f"Fixes in the {fx.profile} profile, in the pack's order")
    return {"intro": intro, "table": table}


def _thresholds(th: dict) -> str:
    return ", ".join(f"{k} {', '.join(fmt_num(x) for x in v) if isinstance(v, list) else fmt_num(v)}"
                     for k, v in th.items()) or "—"


def _verification(recipe) -> Optional[dict]:
    tables = []
    if recipe.gates:
        rows = []
        for g in recipe.gates:
            th = _thresholds(g.thresholds) + (" (placeholder)" if g.placeholder else "")
            rows.append([g.id, g.doc or "—", th, g.published or "—", "yes" if g.required else "no"])
        tables.append(Table([Column("Gate"), Column("What it checks"), Column("Threshold"),
                             Column("Published result"), Column("Required")], rows, caption="Gates"))
    if recipe.engine.install_checks:
        rows = [[str(i + 1), c] for i, c in enumerate(recipe.engine.install_checks)]
        tables.append(Table([Column("#", num=True), Column("Install check")], rows, caption="Install checks"))
    if not tables:
        return None
    intro = []
    if recipe.bench:
        bp = recipe.bench
        desc = f"Bench protocol: {bp.name}"
        if bp.streams:
            desc += f", {', '.join(str(s) for s in bp.streams)} streams"
        if bp.prompt_types:
            desc += f", {', '.join(bp.prompt_types)} prompts"
        desc += (f"; 1 stream median of {bp.single_stream_runs}, more streams median of {bp.multi_stream_runs},"
                 f" cold prefill median of {bp.cold_prefill_runs}; {bp.max_tokens} tokens per stream.")
        intro.append(desc)
        intro += paragraphs(bp.note)
    return {"intro": intro, "tables": tables}


def _dim_value(res, key: str) -> str:
    v = getattr(res, key)
    if v is None:
        return ""
    return f"{v:,}" if isinstance(v, int) else str(v)


def _category(res, dims: list[str]) -> str:
    parts = []
    for k in dims:
        v = getattr(res, k)
        if v is None:
            continue
        if k == "streams":
            parts.append(f"{v} stream" + ("" if v == 1 else "s"))
        elif k == "context":
            parts.append(f"ctx {fmt_num(v)}")
        else:
            parts.append(str(v))
    return " · ".join(parts) or "all"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _charts(gi: int, results: list, claimed_by: str, date: str) -> list[Plot]:
    """A bar chart per metric with two or more numeric values: bars by layout/streams/context,
    one colour per prompt type (or per condition where prompt types do not tell them apart)."""
    plots = []
    metrics = list(OrderedDict.fromkeys((r.metric, r.unit) for r in results))
    for mi, (metric, unit) in enumerate(metrics):
        rs = [r for r in results if r.metric == metric and r.unit == unit and _is_number(r.value)]
        if len(rs) < 2:
            continue
        cat_dims = [k for k in ("layout", "streams", "context") if any(getattr(r, k) is not None for r in rs)]

        def first_clause(r) -> str:
            text = re.split(r"[,;(]", " ".join(r.conditions.split()), maxsplit=1)[0].strip()
            return text if len(text) <= 40 else text[:39] + "…"

        # colours: prompt types when every result has one; otherwise, when two results would share
        # a bar, the first clause of their conditions ("kernels on" / "kernels off"); else one colour
        if all(r.prompt_type for r in rs):
            series_name = lambda r: r.prompt_type  # noqa: E731
        elif len({_category(r, cat_dims) for r in rs}) < len(rs) and all(first_clause(r) for r in rs):
            series_name = first_clause
        else:
            series_name = lambda r: metric_label(metric)  # noqa: E731
        if len({(series_name(r), _category(r, cat_dims)) for r in rs}) < len(rs):
            continue  # still ambiguous: the table alone shows these
        cats = list(OrderedDict.fromkeys(_category(r, cat_dims) for r in rs))
        names = list(OrderedDict.fromkeys(series_name(r) for r in rs))
        grid = {(series_name(r), _category(r, cat_dims)): float(r.value) for r in rs}
        series = tuple(Series(n, tuple(grid.get((n, c)) for c in cats)) for n in names)
        by = " · ".join(cat_dims) or "run"
        chart = BarChart(title=f"{metric_label(metric)} by {by}", categories=tuple(cats), series=series,
                         ylabel=unit)
        plots.append(Plot(filename=f"results-{gi + 1}-{mi + 1}-{slug(metric)}.png", chart=chart,
                          caption=f"{chart.title} ({unit}); claimed_by={claimed_by}"
                                  + (f", {date}" if date else "") + ". The table above holds the same numbers."))
    # throughput metrics measured once each, in the same unit, share one chart
    single: "OrderedDict[str, list]" = OrderedDict()
    for metric, unit in metrics:
        rs = [r for r in results if r.metric == metric and r.unit == unit and _is_number(r.value)]
        if len(rs) == 1 and "/s" in unit:
            single.setdefault(unit, []).append(rs[0])
    for ui, (unit, rs) in enumerate(single.items()):
        if len(rs) < 2:
            continue
        dims = [k for k in ("layout", "streams", "context", "prompt_type") if any(getattr(r, k) is not None for r in rs)]
        labels = tuple(metric_label(r.metric) + (f" · {_category(r, dims)}" if dims else "") for r in rs)
        chart = BarChart(title="Throughput", categories=labels,
                         series=(Series(unit, tuple(float(r.value) for r in rs)),), ylabel=unit)
        plots.append(Plot(filename=f"results-{gi + 1}-{slug(unit)}.png", chart=chart,
                          caption=f"{chart.title}; claimed_by={claimed_by}" + (f", {date}" if date else "")
                                  + ". The table above holds the same numbers."))
    return plots


def _performance(recipe) -> tuple[list[dict], list[Plot]]:
    """One table per provenance (claimed_by, date, recipe version), one row per published
    result with the dimensions it states, plus bar charts of the metrics measured more than once."""
    groups: "OrderedDict[tuple, list]" = OrderedDict()
    for r in recipe.results:
        groups.setdefault((r.claimed_by, r.date or "", r.recipe_version or ""), []).append(r)
    out, plots = [], []
    for gi, ((claimed_by, date, version), results) in enumerate(groups.items()):
        dims = [(k, label) for k, label in DIMENSIONS if any(getattr(r, k) is not None for r in results)]
        conditions = [" ".join(r.conditions.split()) for r in results]
        shared = conditions[0] if len(set(conditions)) == 1 else ""
        columns = [Column("Metric")] + [Column(label) for _, label in dims] + [Column("Value", num=True)]
        if not shared and any(conditions):
            columns.append(Column("Conditions"))
        rows = []
        for r, cond in zip(results, conditions):
            row = [metric_label(r.metric)] + [_dim_value(r, k) or "—" for k, _ in dims] + [fmt_value(r.value, r.unit)]
            if not shared and any(conditions):
                row.append(cond or "—")
            rows.append(row)
        prov = [f"claimed_by={claimed_by}"]
        if date:
            prov.append(f"measured {date}")
        if version:
            prov.append(f"recipe version {version}")
        sources = list(OrderedDict.fromkeys(r.source for r in results if r.source))
        if sources:
            prov.append("source: " + "; ".join(sources))
        title = f"Claimed by {claimed_by}" + (f", {date}" if date else "") + (f", recipe {version}" if version else "")
        charts = _charts(gi, results, claimed_by, date)
        out.append({"title": title, "provenance": " · ".join(prov),
                    "conditions": f"Conditions: {shared}" if shared else "",
                    "table": Table(columns, rows), "plots": charts})
        plots += charts
    return out, plots


def _dont(recipe) -> list[dict]:
    items = []
    enforced = {d.constraint for d in recipe.do_not if d.constraint}
    ids = {c.id for c in recipe.constraints}
    for d in recipe.do_not:
        items.append({"text": d.text, "id": d.constraint, "checked": d.constraint in ids})
    for c in recipe.constraints:
        if c.id not in enforced:
            text = c.reason + (f" ({c.hint})" if c.hint else "")
            items.append({"text": text, "id": c.id, "checked": True})
    return items


def _env_defaults(recipe) -> Optional[Table]:
    rows = []
    by_layout: dict[str, list[str]] = {}
    for lname, lay in recipe.layouts.items():
        for k in list(lay.env) + list(lay.settings):
            by_layout.setdefault(k, []).append(lname)

    def layout_cell(name: str) -> str:
        ls = by_layout.get(name)
        if not ls:
            return "all"
        vals = []
        for ln in ls:
            lay = recipe.layouts[ln]
            v = lay.env.get(name) if name in lay.env else lay.settings.get(name)
            vals.append(f"{ln}: {'(unset)' if v is None else _short(v)}")
        return "; ".join(vals)

    for name, st in recipe.settings.items():
        rows.append([name, "(unset)" if st.value is None else _short(st.value), "setting", layout_cell(name),
                     "—", " ".join(st.doc.split()) or "—"])
    for k in recipe.env:
        value = "(unset)" if k.value is None else k.value
        kind = "env" if k.export else "env (runtime)"
        doc = " ".join(k.doc.split())
        if k.source:
            doc = f"{doc} [{k.source}]" if doc else k.source
        rows.append([k.name, value, kind, layout_cell(k.name), k.code_default or "—", doc or "—"])
    if not rows:
        return None
    return Table([Column("Name"), Column("Default"), Column("Kind"), Column("Per layout"), Column("Code default"),
                  Column("What it does")], rows,
                 caption="Settings and environment knobs (override in .env, the process environment or --set)")


def _short(v: Any) -> str:
    """A setting's value as it would be written in .env (no thousands separators)."""
    if isinstance(v, list):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _facts(pairs: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    return [(k, v if isinstance(v, str) else fmt_num(v)) for k, v in pairs if v not in (None, "", [], 0)]


def _components(recipe) -> list[dict]:
    e, m, hw = recipe.engine, recipe.model, recipe.hardware
    pins = []
    for p in e.pins:
        at = p.commit_prefix or (p.commit or "")[:10] or p.image_digest or ""
        pins.append(" ".join(x for x in (p.name, p.version, at and f"@ {at}") if x) + (f" ({p.role})" if p.role else ""))
    engine = {"title": "Engine", "facts": _facts([
        ("Name", engine_label(recipe)), ("Runner", e.runner), ("Image", shown(recipe, e.image)),
        ("Base image", shown(recipe, e.base_image)),
        ("Pins", "; ".join(pins)), ("Plugins", "; ".join(p.name + (f" ({p.license})" if p.license else "")
                                                       for p in e.plugins)),
        ("Flag catalog", e.flag_catalog)]), "text": paragraphs(e.note),
        "links": [{"text": f"{p.name} source", "url": _http(p.repo)} for p in e.pins if _http(p.repo)]}
    model: dict[str, Any] = {"title": "Model", "facts": _facts([
        ("Hugging Face id", m.hf_id), ("Revision", m.revision), ("License", m.license),
        ("Architecture", m.architecture), ("Parameters", " / ".join(x for x in (m.params_total and f"{m.params_total} total",
                                                                            m.params_active and f"{m.params_active} active") if x)),
        ("Layers", m.layers), ("Routed experts", m.routed_experts), ("Experts per token", m.experts_per_token),
        ("Shared experts", m.shared_experts), ("Native context", m.context_native),
        ("Served context", m.context_served), ("Served name", m.served_name),
        ("Modalities", ", ".join(m.modalities)), ("Precision", m.precision),
        ("Size", f"{fmt_num(m.size_gb)} GB" if m.size_gb else None)]), "text": paragraphs(m.notes),
        "links": []}
    sources = recipe.checkpoint.sources
    if sources:
        model["facts"].append(("Checkpoint sources", "; ".join(
            (s.repo or s.id) + (f" @ {s.revision}" if s.revision else "") + (f" ({s.role})" if s.role else "")
            for s in sources)))
    out = recipe.checkpoint.output
    if out:
        model["facts"].append(("Served layout", out.layout + (f" — {' '.join(out.description.split())}"
                                                               if out.description else "")))
    hardware = {"title": "Hardware", "facts": _facts([
        ("Accelerator", hardware_label(recipe)), ("Vendor", hw.vendor),
        ("Memory per device", f"{fmt_num(hw.memory_gib_per_device)} GiB" if hw.memory_gib_per_device else None),
        ("Compute capability", hw.compute_capability), ("SMs", hw.sms), ("Interconnect", hw.interconnect),
        ("PCIe", " ".join(x for x in (hw.pcie_gen and f"gen {hw.pcie_gen}", hw.pcie_width_min and f"x{hw.pcie_width_min} or wider") if x)),
        ("P2P", hw.p2p if hw.p2p != "n/a" else None), ("Power cap", f"{hw.power_cap_w} W" if hw.power_cap_w else None),
        ("Driver", hw.driver)]), "text": [" ".join(n.split()) for n in hw.notes],
        "links": []}
    return [engine, model, hardware]


def _http(url: Optional[str]) -> Optional[str]:
    return url if url and url.startswith(("https://", "http://")) else None


def _install(recipe) -> list[str]:
    hw, e = recipe.hardware, recipe.engine
    items = list(hw.software)
    if hw.driver:
        items.append(f"Driver: {hw.driver}")
    if hw.host_ram_gib_min:
        items.append(f"Host RAM: {fmt_num(hw.host_ram_gib_min)} GiB or more")
    if hw.disk_gib_min:
        items.append(f"Disk: {fmt_num(hw.disk_gib_min)} GiB free or more")
    if hw.cpu_cores_min:
        items.append(f"CPU cores: {hw.cpu_cores_min} or more")
    if e.install:
        if e.install.requirements:
            items.append("Engine packages (own venv): " + ", ".join(e.install.requirements))
        if e.install.uninstall:
            items.append("Removed after install: " + ", ".join(e.install.uninstall))
        if e.install.note:
            items.append(" ".join(e.install.note.split()))
    if e.build and e.build.base:
        items.append(f"Image built on {e.build.base}" + (f" (about {e.build.duration})" if e.build.duration else ""))
    return items


def _placeholders(recipe, launches: list) -> Optional[Table]:
    """The <PLACEHOLDERS> the launch blocks hold and the path settings a user maps to their rig."""
    from recipekit.config import BUILTIN_PLACEHOLDERS  # lazy: pulls pydantic, pydantic_core

    texts = "\n".join(launch.text for launch in launches)
    rows = []
    covered: set[str] = set()
    for key, placeholder in BUILTIN_PLACEHOLDERS.items():
        if placeholder not in texts:
            continue
        users = [n for n, st in recipe.settings.items() if isinstance(st.value, str) and f"${{{key}}}" in st.value]
        covered.update(users)
        how = (f"set {', '.join(users)} in .env, the environment or --set; " if users else "") \
            + f"recipe render {recipe.id} --host-paths writes this host's folder"
        rows.append([placeholder, f"a folder of the toolkit's home ({key})", how])
    for name, st in recipe.settings.items():
        if st.type == "path" and name not in covered:
            default = "(unset)" if st.value is None else _short(st.value)
            rows.append([name, " ".join(st.doc.split()) or "a path on your machine",
                         f"default {shown(recipe, default)}; set {name} in .env, the environment or --set"])
    if not rows:
        return None
    return Table([Column("Placeholder or setting"), Column("What it stands for"), Column("How to set it")], rows,
                 caption="Paths in the launch blocks describe a machine layout, not yours: map them before launching")


def _downloads(recipe) -> Optional[Table]:
    if not recipe.downloads:
        return None
    rows = [[d.kind, {"text": d.url, "url": _http(d.url)}, " ".join(d.note.split()) or "—", d.pinned_at or "—"]
            for d in recipe.downloads]
    return Table([Column("Kind"), Column("Where"), Column("What"), Column("Pinned at")], rows)


def _revisions(recipe) -> tuple[Optional[Table], list[str]]:
    rv = recipe.revision
    if rv is None:
        return None, []
    notes = []
    head = " · ".join(x for x in (rv.number and f"revision {rv.number}",
                                  rv.recipe_version and f"recipe version {rv.recipe_version}") if x)
    if head:
        notes.append(head)
    notes += paragraphs(rv.notes)
    table = None
    if rv.history:
        table = Table([Column("Commit"), Column("When"), Column("Change")],
                      [[h.commit or "—", h.when or "—", " ".join(h.text.split())] for h in rv.history],
                      caption="Revision history")
    return table, notes


def recipe_page(loaded, launches: list[Launch], *, json_href: str, json_url: str,
                source_path: str = "") -> tuple[RecipePage, list[Plot]]:
    """Build the page model of one recipe. `launches` hold the rendered launch text per layout."""
    r = loaded.recipe
    org = r.model.hf_id.split("/")[0] if "/" in r.model.hf_id else ""
    meta = []
    if r.revision and r.revision.number:
        meta.append(f"revision {r.revision.number}")
    if r.revision and r.revision.recipe_version:
        meta.append(f"recipe {r.revision.recipe_version}")
    if r.license:
        meta.append(f"license {r.license}")
    performance, plots = _performance(r)
    revisions, revision_notes = _revisions(r)
    page = RecipePage(
        id=r.id, title=r.title, org=org, status=r.status, status_note=STATUS_NOTES.get(r.status, ""),
        summary=" ".join(r.summary.split()), description="", tags=list(r.tags), meta_line=" · ".join(meta),
        json_href=json_href, json_url=json_url, url=_http(r.url), source_path=source_path, glance=_glance(r), launches=launches,
        launch_note=" ".join(r.launch.note.split()), checks_passed=list(r.checks_passed), notes=list(r.notes),
        guide=_guide(r, source_path), fixes=_fixes(r), verification=_verification(r), performance=performance,
        plots=plots, known_issues=list(r.known_issues), dont=_dont(r), env_defaults=_env_defaults(r),
        components=_components(r), install=_install(r), downloads=_downloads(r),
        placeholders=_placeholders(r, launches),
        credits=[{"name": c.name, "role": c.role + (f" ({c.license})" if c.license else ""), "url": _http(c.url)}
                 for c in r.credits],
        revisions=revisions, revision_notes=revision_notes)
    return page, plots


# --------------------------------------------------------------------------- the index

def headline(recipe, limit: int = 3) -> list[str]:
    """The first published result of each metric (up to `limit`), as one line each."""
    seen, out = set(), []
    for res in recipe.results:
        if res.metric in seen:
            continue
        seen.add(res.metric)
        dims = ", ".join(x for x in (res.layout, res.streams is not None and f"{res.streams} stream"
                                     + ("s" if res.streams != 1 else ""), res.prompt_type) if x)
        out.append(f"{metric_label(res.metric)}: {fmt_value(res.value, res.unit)}" + (f" ({dims})" if dims else ""))
        if len(out) >= limit:
            break
    return out


def index_item(loaded, href: str, json_href: str) -> dict:
    r = loaded.recipe
    return {"id": r.id, "title": r.title, "model": r.model.hf_id, "status": r.status, "backend": r.backend,
            "hardware_key": slug(r.hardware.accelerator), "hardware_label": hardware_label(r),
            "hardware_name": r.hardware.accelerator, "engine": engine_label(r),
            "summary": " ".join(r.summary.split()), "headline": headline(r), "href": href, "json_href": json_href}


def filters(items: list[dict]) -> list[dict]:
    """The index filters (hardware, backend) with the recipe count of each option."""
    out = []
    for name, label, key, text in (("hardware", "Hardware", "hardware_key", "hardware_name"),
                                   ("backend", "Backend", "backend", "backend")):
        counts: "OrderedDict[str, list]" = OrderedDict()
        for it in sorted(items, key=lambda i: i[text].lower()):
            counts.setdefault(it[key], [it[text], 0])[1] += 1
        out.append({"name": name, "label": label, "options": [
            {"value": v, "label": lbl, "count": n, "page": f"{name}/{v}.html"} for v, (lbl, n) in counts.items()]})
    return out
