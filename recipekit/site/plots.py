"""Bench plots for the recipe pages: PNG bar charts drawn with matplotlib's Agg canvas.

Deterministic: no pyplot global state, fixed size and DPI, fixed style, and no metadata
(matplotlib's version or a date) in the PNG, so the same data gives the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

from recipekit import png

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.0, 100
SCALE = 2  # pixels per CSS pixel: crisp on high-density screens, small labels stay legible
PALETTE = ["#0b5cad", "#d97706", "#1a7f37", "#7c3aed", "#b42318", "#0e7490"]


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float | None, ...]   # one per category; None = not measured


@dataclass(frozen=True)
class BarChart:
    title: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    ylabel: str

    def alt_text(self) -> str:
        """A text version of the chart for screen readers: every bar's value."""
        parts = []
        for s in self.series:
            vals = ", ".join(f"{c}: {_fmt(v)}" for c, v in zip(self.categories, s.values) if v is not None)
            parts.append(f"{s.name}: {vals}" if len(self.series) > 1 else vals)
        return f"Bar chart, {self.title} ({self.ylabel}). " + "; ".join(parts) + "."


def _fmt(v: float) -> str:
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.2f}".rstrip("0").rstrip(".") if abs(v) < 10 else f"{v:,.1f}".rstrip("0").rstrip(".")


def render_png(chart: BarChart) -> bytes:
    """Draw the chart and return the PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: pulls matplotlib
    from matplotlib.figure import Figure  # lazy: pulls matplotlib

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    n = max(len(chart.series), 1)
    width = 0.8 / n
    xs = range(len(chart.categories))
    bars_total = n * max(len(chart.categories), 1)
    label_size = 8 if bars_total <= 9 else 7
    for i, s in enumerate(chart.series):
        offs = [x - 0.4 + width * (i + 0.5) for x in xs]
        heights = [v if v is not None else 0.0 for v in s.values]
        bars = ax.bar(offs, heights, width=width * 0.95, label=s.name, color=PALETTE[i % len(PALETTE)])
        for bar, v in zip(bars, s.values):
            if v is not None:
                ax.annotate(_fmt(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=label_size, xytext=(0, 2), textcoords="offset points",
                            rotation=90 if bars_total > 14 else 0)
    ax.set_xticks(list(xs))
    crowded = sum(len(c) for c in chart.categories) > 80
    ax.set_xticklabels(chart.categories, fontsize=8 if crowded else 9,
                       rotation=20 if crowded else 0, ha="right" if crowded else "center")
    ax.set_ylabel(chart.ylabel)
    from matplotlib.ticker import FuncFormatter  # lazy: pulls matplotlib
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _fmt(v)))
    ax.set_title(chart.title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.margins(y=0.15)
    if len(chart.series) > 1:
        # outside the axes: "best" placement is slow and may cover bars
        ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return png.from_figure(fig, dpi=DPI * SCALE)


def pixel_size() -> tuple[int, int]:
    """The size the page shows the chart at, in CSS pixels (the PNG has SCALE times as many)."""
    return int(WIDTH_IN * DPI), int(HEIGHT_IN * DPI)
