"""The floors of the package and its folder-level import graph, drawn as docs/floors.png.

Three floors, as DESIGN.md names them: the core at the bottom (recipekit/*.py and
recipekit/checkpoint/: schema, config, errors, I/O helpers, constraints, the format I/O, backend
discovery and spec), the domain folders above it (backends/, hybrid/, bench/, tools/, patches/),
the application on top (recipekit/cli with recipekit/__main__.py, apply, multinode, site, rehearse, and
the two application modules that sit in recipekit/: lint.py and export.py). An import edge may run down
a floor or stay on one, never up; on the domain floor an edge between two folders must be
listed in SIDEWAYS with its reason (the design asks for none, and none is listed).

`python -m recipekit.tools.floors [--png docs/floors.png]` prints the folder graph and writes
the picture; the PNG carries the sha256 of the graph's edges in a text chunk, so a test can
tell a stale picture from the code without comparing pixels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import defaultdict
from pathlib import Path
from typing import Optional

from recipekit import atomic, png
from recipekit.tools.import_graph import ROOT, cycles, import_graph

CORE, DOMAIN, APPLICATION = 0, 1, 2
FLOOR_NAMES = {CORE: "core", DOMAIN: "domain", APPLICATION: "application"}

# folder (the node of the folder graph) -> floor
FOLDERS = {
    "recipekit": CORE,
    "recipekit/checkpoint": CORE,
    "recipekit/recipes": CORE,  # the catalog's YAML, data only
    "backends": DOMAIN,
    "hybrid": DOMAIN,
    "bench": DOMAIN,
    "tools": DOMAIN,
    "patches": DOMAIN,
    "recipekit/cli": APPLICATION,
    "recipekit/apply": APPLICATION,
    "recipekit/multinode": APPLICATION,
    "recipekit/site": APPLICATION,
    "recipekit/rehearse": APPLICATION,
    "recipekit (app)": APPLICATION,
}
# modules of recipekit/ that belong to the application (they drive the domain folders)
APP_MODULES = {"recipekit.lint", "recipekit.export"}
ENTRY = "recipekit.__main__"  # `python -m recipekit`: the CLI's entry, drawn with the CLI
# the sub-package of recipekit.* each mapped folder holds (pyproject.toml's package-dir)
_MAPPED = {"backends", "hybrid", "bench", "tools", "patches"}
_SUBFOLDERS = {"checkpoint", "recipes", "cli", "apply", "multinode", "site", "rehearse"}

# domain -> domain folder edges allowed, each with what it uses and why it stays: none. What two
# domain folders share sits in the core (recipekit/checkpoint: the Engram addressing, the tiny
# DSV4.1, the Gaudi port format, where a source lands), or the application hands it in (the
# StepKit's patch step, the doctor's host facts for a bench report, the Engram doctor checks).
SIDEWAYS: dict[tuple[str, str], str] = {}


def folder_of(module: str) -> str:
    """The folder-graph node of a dotted module name."""
    if module in APP_MODULES:
        return "recipekit (app)"
    if module == ENTRY:
        return "recipekit/cli"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in _MAPPED:
        return parts[1]
    if (
        len(parts) > 1
        and parts[1] in _SUBFOLDERS
        and len(parts) > 2
        or module in (f"recipekit.{s}" for s in _SUBFOLDERS)
    ):
        return "recipekit/" + parts[1]
    return "recipekit"


def folder_graph(graph: Optional[dict[str, set[str]]] = None) -> dict[str, dict[str, list[str]]]:
    """folder -> folder it imports -> the module edges ("a -> b") behind it, sorted."""
    graph = import_graph(ROOT) if graph is None else graph
    out: dict[str, dict[str, list[str]]] = {f: {} for f in FOLDERS}
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for a, targets in graph.items():
        for b in targets:
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb:
                edges[(fa, fb)].append(f"{a} -> {b}")
    for (fa, fb), via in edges.items():
        out.setdefault(fa, {})[fb] = sorted(via)
    return out


def upward(fg: dict[str, dict[str, list[str]]]) -> list[str]:
    """Every folder edge that runs up a floor, or sideways on the domain floor unlisted."""
    bad = []
    for fa, targets in sorted(fg.items()):
        for fb, via in sorted(targets.items()):
            la, lb = FOLDERS.get(fa), FOLDERS.get(fb)
            if la is None or lb is None:
                bad.append(f"{fa} -> {fb}: a folder with no floor (add it to FOLDERS in tools/floors.py)")
            elif lb > la:
                bad.append(f"{fa} ({FLOOR_NAMES[la]}) -> {fb} ({FLOOR_NAMES[lb]}) runs up, via {', '.join(via)}")
            elif la == lb == DOMAIN and (fa, fb) not in SIDEWAYS:
                bad.append(f"{fa} -> {fb} joins two domain folders, via {', '.join(via)}")
    return bad


def folder_cycles(fg: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    return cycles({f: set(t) for f, t in fg.items()})


def edges_digest(fg: dict[str, dict[str, list[str]]]) -> str:
    """sha256 of the folder edges (and the floors): what the picture shows."""
    data = {
        "floors": FOLDERS,
        "edges": sorted([fa, fb] for fa, t in fg.items() for fb in t),
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


DIGEST_KEY = "recipekit-floors-sha256"


def draw(fg: dict[str, dict[str, list[str]]]) -> bytes:
    """The folder graph as PNG bytes: one row per floor, an arrow per folder edge, the digest of
    the edges in a tEXt chunk."""
    import matplotlib  # lazy: pulls matplotlib, numpy, pyparsing (only the picture needs matplotlib)

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # lazy: pulls matplotlib

    rows: dict[int, list[str]] = defaultdict(list)
    for f, floor in FOLDERS.items():
        rows[floor].append(f)
    pos: dict[str, tuple[float, float]] = {}
    for floor, names in rows.items():
        for i, name in enumerate(sorted(names)):
            pos[name] = ((i + 0.5) / len(names), floor)
    fig, ax = plt.subplots(figsize=(12, 6))
    colours = {CORE: "#dbe9f6", DOMAIN: "#e3f1dc", APPLICATION: "#f7e3d3"}
    for floor, label in FLOOR_NAMES.items():
        ax.axhspan(floor - 0.4, floor + 0.4, color=colours[floor], zorder=0)
        ax.text(-0.02, floor, label, ha="right", va="center", fontsize=11, weight="bold")
    for fa, targets in fg.items():
        for fb in targets:
            (x0, y0), (x1, y1) = pos[fa], pos[fb]
            bend = 0.25 if y0 == y1 else 0.05
            ax.annotate(
                "",
                xy=(x1, y1),
                xytext=(x0, y0),
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": "#555555",
                    "lw": 0.8,
                    "shrinkA": 18,
                    "shrinkB": 18,
                    "connectionstyle": f"arc3,rad={bend}",
                },
                zorder=1,
            )
    for name, (x, y) in pos.items():
        ax.text(x, y, name, ha="center", va="center", fontsize=9, zorder=2, bbox={"boxstyle": "round", "fc": "white"})
    ax.set_xlim(-0.15, 1.02)
    ax.set_ylim(-0.5, 2.5)
    ax.axis("off")
    ax.set_title("recipekit: folder import graph (an arrow runs from the importer to what it imports)")
    data = png.from_figure(fig, dpi=100, text={DIGEST_KEY: edges_digest(fg)})
    plt.close(fig)
    return data


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m recipekit.tools.floors", description=__doc__.splitlines()[0])
    ap.add_argument("--png", type=Path, help="write the picture here (e.g. docs/floors.png)")
    args = ap.parse_args(argv)
    fg = folder_graph()
    for fa in sorted(fg):
        print(f"{fa} [{FLOOR_NAMES[FOLDERS[fa]]}] -> {', '.join(sorted(fg[fa])) or '(nothing)'}")
    bad = upward(fg) + [" <-> ".join(c) for c in folder_cycles(fg)]
    for line in bad:
        print("VIOLATION " + line)
    if args.png:
        args.png.parent.mkdir(parents=True, exist_ok=True)
        atomic.atomic_write_bytes(args.png, draw(fg), keep_mode=True)
        print(f"wrote {args.png} ({DIGEST_KEY} {edges_digest(fg)})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
