"""Bench results on disk: JSON with provenance, a Markdown table in the seeds' shape, PNG plots.

Files are written to a temp name, fsynced and renamed, so a report is whole or absent.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
from pathlib import Path
from typing import Any

from recipekit import __version__, atomic, png
from recipekit.textsafe import shown

REPORT_SCHEMA = "recipekit.bench/1"


def host_facts(host: Any) -> dict:
    """The published facts of the machine the client ran on, from the doctor's host detection
    (`recipekit.tools.doctor.collect.collect_host`, the one host detection, which the application
    runs and hands in): OS, kernel, machine, the CPUs this process may use, total memory, CPU
    model; plus the client's Python. No host name: reports get published."""
    facts: dict[str, Any] = {
        "os": host.os,
        "kernel": host.kernel,
        "machine": host.machine,
        "python": platform.python_version(),
        "cpu_count": host.cpu_count,
        "mem_total_gib": round(host.ram_total_bytes / 2**30, 1) if host.ram_total_bytes else None,
    }
    if host.cpu_model:
        facts["cpu_model"] = host.cpu_model
    return facts


def provenance(server_models: Any, host: Any, recipe: dict | None = None, extra: dict | None = None) -> dict:
    """The provenance block of a report; `host` is the doctor's HostFacts of the client machine."""
    return {
        "toolkit": {"name": "recipekit", "version": __version__},
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "recipe": recipe,  # {id, content_sha256, pins} or None for a bare --url run
        "host": host_facts(host),
        "server_models": server_models,
        **(extra or {}),
    }


def _fmt(x: float | None, unit: str = "", nd: int = 1) -> str:
    """A figure, or — for none; a non-finite or non-numeric value is never printed as a figure."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return "—"
    return f"{x:.{nd}f}{unit}"


def markdown(result: dict) -> str:
    """Tables like the seeds: per prompt type, Streams | Per stream | Aggregate | First token."""
    prov = result.get("provenance", {})
    rec = prov.get("recipe") or {}
    lines = [f"# Decode benchmark ({result['protocol']})", ""]
    lines.append(
        f"Recipe: {rec.get('id', '—')}  ·  server model: {result.get('model', '—')}  ·  "
        f"date: {prov.get('date', '—')}  ·  max_tokens {result['config']['max_tokens']}, greedy, forced length"
        + ("  ·  --quick" if result["config"].get("quick") else "")
    )
    cells = result["decode"]
    types = list(dict.fromkeys(c["prompt_type"] for c in cells))
    levels = sorted({c["streams"] for c in cells})
    by = {(c["prompt_type"], c["streams"]): c for c in cells}
    lines += ["", "| Streams | " + " | ".join(t.capitalize() for t in types) + " |", "|---:|" + "---:|" * len(types)]
    for n in levels:
        row = [_fmt(by[(t, n)]["figure"], " tok/s") if (t, n) in by else "—" for t in types]
        lines.append(f"| {n} | " + " | ".join(row) + " |")
    lines += ["", "1 stream: median of the per-stream runs; N streams: median aggregate of the waves."]
    lo = result.get("left_out") or {}
    if lo.get("left_out"):
        why = ", ".join(f"{n} {code}" for code, n in lo["reasons"].items())
        lines.append(
            f"**Left out:** {lo['left_out']} of {lo['requests']} measured request(s) gave no figure ({why}): "
            "a request counts only when it answered and its `usage` agrees within one token with the "
            "tokens the client counted on the stream and the prompt ids it sent."
        )
        for code, first in lo.get("first", {}).items():
            lines.append(f"- first {shown(code)}: {shown(first)}")  # server text: controls escaped
    rt = result.get("retokenized") or {}
    if rt.get("disagree"):
        lines.append(
            f"**Re-tokenized:** the server's /tokenize of {rt['disagree']} of {rt['checked']} reply text(s) "
            "differs from the tokens streamed by more than one (reported only: re-tokenizing generated "
            "text need not give back the generated count)."
        )
    busy = sum(c.get("waves_started_busy", 0) for c in cells)
    foreign = sum(c.get("foreign_tokens", 0) for c in cells)
    burst = sum(c.get("streams_burst", 0) for c in cells)
    if burst:
        lines.append(
            f"**Buffered output:** {burst} stream(s) received their tokens in bursts, so their "
            "decode speed could not be measured (—); the server's output was held back (an overloaded "
            "host or a buffering proxy)."
        )
    if busy or foreign:
        lines.append(
            f"**Not an idle server:** {busy} wave(s) started with requests already running or waiting; "
            f"{foreign:.0f} tokens generated during the waves were not ours."
        )
    for t in types:
        lines += [
            "",
            f"## {t.capitalize()}",
            "",
            "| Streams | Per stream | Aggregate | First token |",
            "|---:|---:|---:|---:|",
        ]
        for n in levels:
            c = by.get((t, n))
            if not c:
                continue
            lo, hi = c["ttft_min_s"], c["ttft_max_s"]
            nd = 2 if (hi or 0) >= 0.1 else 3  # tiny local models answer in milliseconds
            ft = _fmt(c["ttft_median_s"], " s", nd) if n == 1 or lo is None else f"{lo:.{nd}f} to {hi:.{nd}f} s"
            fail = f" ({c['streams_failed']} failed)" if c["streams_failed"] else ""
            lines.append(
                f"| {n} | {_fmt(c['per_stream_tps'], ' tok/s')} | {_fmt(c['aggregate_tps'], ' tok/s')} | {ft}{fail} |"
            )
    p = result.get("prefill")
    if p:
        hits = p.get("prefix_cache_hits_delta")
        lines += [
            "",
            "## Cold prefill",
            "",
            "| Prompt tokens | Runs | Median prefill | Median TTFT | Prefix-cache hits |",
            "|---:|---:|---:|---:|---:|",
            f"| {p['prompt_tokens_target']} | {p['runs']} | {_fmt(p['median_prefill_tps'], ' tok/s')} "
            f"| {_fmt(p['median_ttft_s'], ' s', 3)} | {'—' if hits is None else int(hits)} |",
        ]
    cmp_ = result.get("compare")
    if cmp_:
        lines += [
            "",
            f"## Against published results (tolerance {cmp_['tolerance']:.0%})",
            "",
            "| Point | Published | Measured | Change | Status |",
            "|---|---:|---:|---:|---|",
        ]
        for r in cmp_["rows"]:
            ch = "—" if r["change"] is None else f"{r['change']:+.1%}"
            lines.append(f"| {r['point']} | {_fmt(r['published'])} | {_fmt(r['measured'])} | {ch} | {r['status']} |")
    return "\n".join(lines) + "\n"


def plots(result: dict, out_dir: Path) -> list[Path]:
    """tok/s against streams per prompt type, and TTFT against streams; PNG via matplotlib Agg."""
    import matplotlib  # lazy: pulls matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: pulls matplotlib

    written = []
    cells = result["decode"]
    types = list(dict.fromkeys(c["prompt_type"] for c in cells))
    for key, ylabel, name in (
        ("figure", "decode tok/s (c1 per stream, cN aggregate)", "decode_tps.png"),
        ("ttft_median_s", "median time to first token (s)", "ttft.png"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
        plotted = 0
        for t in types:
            pts = sorted((c["streams"], c[key]) for c in cells if c["prompt_type"] == t and c[key] is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=t)
                plotted += 1
        if not plotted:  # e.g. every stream arrived in bursts: say so rather than draw an empty frame
            ax.text(0.5, 0.5, "no measurable points (see bench.md)", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("concurrent streams")
        ax.set_ylabel(ylabel)
        ax.set_xticks(sorted({c["streams"] for c in cells}))
        ax.grid(True, alpha=0.3)
        if plotted:
            ax.legend()
        ax.set_title(f"{result.get('model', '')} — {result['protocol']}", fontsize=9)
        fig.tight_layout()
        data = png.from_figure(fig)
        plt.close(fig)
        atomic.atomic_write_bytes(out_dir / name, data, sync_dir=None)
        written.append(out_dir / name)
    return written


def write_report(result: dict, out_dir: Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    paths = {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md"}
    atomic.atomic_write_text(paths["json"], json.dumps(result, indent=2, default=str) + "\n", sync_dir=None)
    atomic.atomic_write_text(paths["markdown"], markdown(result), sync_dir=None)
    for p in plots(result, out_dir):
        paths[p.stem] = p
    return paths
