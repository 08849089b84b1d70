"""Compare a bench result with a recipe's published numbers; flag regressions beyond a tolerance.

Published points are normalised to {prompt_type, streams, metric, value} where metric is
`decode_tps` (c1 per stream, cN aggregate — the protocol's figure) or `prefill_tps`.
Only a drop beyond the tolerance is a regression; a gain is reported, never failed.
"""

from __future__ import annotations

from typing import Iterable


def measured_value(result: dict, point: dict) -> float | None:
    if point["metric"] == "prefill_tps":
        p = result.get("prefill") or {}
        return p.get("median_prefill_tps")
    for c in result.get("decode", []):
        if c["streams"] == point.get("streams") and c["prompt_type"] == point.get("prompt_type"):
            return c["figure"]
    return None


def compare(result: dict, published: Iterable[dict], tolerance: float = 0.10) -> dict:
    rows = []
    for p in published:
        m = measured_value(result, p)
        label = (
            f"{p['metric']} {p.get('prompt_type', '')} x{p.get('streams')}".strip()
            if p["metric"] != "prefill_tps"
            else "cold prefill tok/s"
        )
        if m is None:
            rows.append(
                {"point": label, "published": p["value"], "measured": None, "change": None, "status": "not measured"}
            )
            continue
        change = m / p["value"] - 1.0 if p["value"] else None
        status = "ok"
        if change is not None and change < -tolerance:
            status = "REGRESSION"
        elif change is not None and change > tolerance:
            status = "faster"
        rows.append({"point": label, "published": p["value"], "measured": m, "change": change, "status": status})
    return {
        "tolerance": tolerance,
        "rows": rows,
        "regressions": sum(r["status"] == "REGRESSION" for r in rows),
        "compared": sum(r["measured"] is not None for r in rows),
    }
