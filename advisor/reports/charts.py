"""Charts for the HTML reports and the dashboard, drawn by matplotlib as inline SVG.

Offline by construction: no fonts or scripts are fetched, text stays <text> (matplotlib escapes it,
and every label here is also passed through escape.plain first), and ids are salted so that a page
holding several charts keeps them apart. Each function returns markupsafe.Markup: the SVG is the
advisor's own output, built from numbers and escaped labels.
"""

from __future__ import annotations

import io
import itertools
import math
import re
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from markupsafe import Markup

from advisor import escape

if TYPE_CHECKING:
    from advisor.capacity.result import CapacityResult
import functools

BASELINE, CANDIDATE = "#4c72b0", "#dd8452"
VERDICT_COLOR = {"improved": "#2a9d4b", "regressed": "#c0392b", "no change": "#7f8c8d", "inconclusive": "#b7950b"}
_ids = itertools.count()


# pyplot keeps global state (current figure, rcParams): the dashboard's threads and the schedule
# draw one chart at a time.
LOCK = threading.RLock()


def charted(fn):
    """Draws under LOCK (the decorated chart functions)."""

    @functools.wraps(fn)
    def locked(*args, **kwargs):
        with LOCK:
            return fn(*args, **kwargs)

    return locked


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False,
                         "axes.spines.right": False, "figure.dpi": 96})
    return plt


def _svg(fig, label: str) -> Markup:
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = f"chart{next(_ids)}"
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]  # no XML declaration or doctype inside HTML
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)  # RDF boilerplate, read as text by some
    title = escape.plain(label).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    svg = re.sub(r"<svg ", f'<svg role="img" aria-label="{title.replace(chr(34), "&quot;")}" class="chart" ', svg, 1)
    return Markup(svg)


def _label(text: object, limit: int = 60) -> str:
    # Mathtext would read $...$ in a label as a formula; a label is data, shown as it is.
    return escape.one_line(escape.plain(text), limit).replace("$", r"\$")


@charted
def forest(rows: Sequence[tuple[str, float | None, tuple[float, float] | None, str]], margin: float = 0.05,
           title: str = "candidate / baseline") -> Markup:
    """Ratios with their intervals, one row each (label, ratio, ci, verdict), on a log axis with
    1 and the equivalence margin marked."""
    plt = _pyplot()
    shown = [r for r in rows if r[1] is not None and r[1] > 0]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * max(len(shown), 1) + 0.9))
    if not shown:
        ax.text(0.5, 0.5, "no ratio could be estimated", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return _svg(fig, title)
    lows, highs = [], []
    for i, (label, ratio, ci, verdict) in enumerate(reversed(shown)):
        color = VERDICT_COLOR.get(verdict, "#333333")
        if ci and all(math.isfinite(c) and c > 0 for c in ci):
            ax.plot(ci, [i, i], color=color, linewidth=2)
            lows.append(ci[0])
            highs.append(ci[1])
        ax.plot([ratio], [i], "o", color=color, markersize=6)
        lows.append(ratio)
        highs.append(ratio)
    ax.axvspan(1 - margin, 1 + margin, color="#dddddd", alpha=0.6, linewidth=0)
    ax.axvline(1.0, color="#555555", linewidth=1)
    ax.set_xscale("log")
    lo, hi = min(min(lows), 1 - margin) / 1.15, max(max(highs), 1 + margin) * 1.15
    ax.set_xlim(lo, hi)
    ax.set_yticks(range(len(shown)), [_label(r[0]) for r in reversed(shown)])
    ax.set_xlabel(_label(title) + "  (< 1 is lower)")
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    return _svg(fig, "forest plot: " + title)


@charted
def blocks(points: Sequence[tuple[int, str, float | None, bool]], ylabel: str) -> Markup:
    """Per-block values of both arms in run order: (position, arm, value, valid); invalid blocks hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    for arm, color in (("baseline", BASELINE), ("candidate", CANDIDATE)):
        for valid in (True, False):
            pts = [(x, y) for x, a, y, v in points if a == arm and v == valid and y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o" if valid else "o", color=color,
                        markerfacecolor=color if valid else "none",
                        label=arm + ("" if valid else " (invalid block, not judged)"))
    if not ax.lines:
        ax.text(0.5, 0.5, "no block has ended yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(frameon=False, fontsize=8)
    ax.set_xlabel("block, in run order")
    ax.set_ylabel(_label(ylabel))
    values = [y for _, _, y, _ in points if y is not None]
    ax.set_ylim(0, max(values) * 1.12 if values and max(values) > 0 else 1)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _svg(fig, "per-block " + ylabel)


@charted
def sparkline(values: Sequence[float | None], label: str) -> Markup:
    """A small line without axes; gaps where a value is missing."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.8, 0.4))
    ys = [float("nan") if v is None else v for v in values]
    if any(math.isfinite(y) for y in ys):
        ax.plot(range(len(ys)), ys, color=BASELINE, linewidth=1.2)
    ax.set_axis_off()
    return _svg(fig, label)


@charted
def daily(days: Sequence[datetime], series: dict[str, Sequence[float | None]],
          previous: dict[str, Sequence[float | None]] | None, ylabel: str, title: str) -> Markup:
    """Daily values of a few series (p50, p95, p99) for this period, and dashed for the previous one
    on the same weekday positions."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    xs = list(range(len(days)))
    for i, (name, values) in enumerate(series.items()):
        color = f"C{i}"
        ax.plot(xs, [float("nan") if v is None else v for v in values], "o-", color=color,
                label=f"{_label(name)} this period", markersize=3)
        if previous and name in previous:
            ax.plot(xs, [float("nan") if v is None else v for v in previous[name]], "--", color=color,
                    alpha=0.6, label=f"{_label(name)} period before")
    ax.set_xticks(xs, [d.strftime("%a %d") for d in days])
    ax.set_ylabel(_label(ylabel))
    ax.set_title(_label(title), loc="left", fontsize=9)
    ax.set_ylim(bottom=0)
    ax.legend(frameon=False, fontsize=7, ncol=2)
    return _svg(fig, title)


@charted
def evidence(rows: Sequence[tuple[str, float, float]], title: str) -> Markup:
    """Each piece of evidence as its value over the threshold it was compared with (1 = at the
    threshold), so that how far past its line each signal is reads at a glance."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.38 * max(len(rows), 1) + 0.8))
    ratios = [v / t if t else float("nan") for _, v, t in rows]
    ys = list(range(len(rows)))[::-1]
    ax.barh(ys, ratios, color=["#c0392b" if r >= 1 else "#4c72b0" for r in ratios], height=0.5)
    ax.axvline(1.0, color="#555555", linewidth=1)
    ax.set_yticks(ys, [_label(r[0], 40) for r in rows])
    ax.set_xlabel("value / threshold (1 = at the threshold)")
    ax.set_title(_label(title), loc="left", fontsize=9)
    return _svg(fig, "evidence: " + title)


@charted
def attainment_of(r: CapacityResult) -> Markup:
    """A capacity search's attainment chart (`attainment`), from its result."""
    series = {o.label: [(t.rate, t.shares.get(o.name), t.outcome) for t in r.trials] for o in r.objectives}
    return attainment(series, {o.label: o.share for o in r.objectives}, (r.low, r.high), r.estimate)


def attainment(series: dict[str, Sequence[tuple[float, float | None, str]]], targets: dict[str, float],
               interval: tuple[float | None, float | None], estimate: float | None) -> Markup:
    """The attainment curve of a capacity search: per objective (label -> points of (rate, share,
    outcome)), the share of requests within it against the rate, each trial a point (pass filled,
    fail crossed, unclear hollow), its target share dashed, and the capacity's interval shaded."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    colors = itertools.cycle(["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2"])
    rates = [r for pts in series.values() for r, s, _ in pts if s is not None]
    for label, pts in series.items():
        color = next(colors)
        shown = sorted((r, s, o) for r, s, o in pts if s is not None)
        if not shown:
            continue
        ax.plot([p[0] for p in shown], [p[1] for p in shown], "-", color=color, linewidth=1, alpha=0.6)
        for outcome, marker, face in (("pass", "o", color), ("unclear", "o", "none"), ("fail", "x", color)):
            sel = [p for p in shown if p[2] == outcome]
            if sel:
                ax.plot([p[0] for p in sel], [p[1] for p in sel], marker, color=color, markerfacecolor=face,
                        linestyle="none")
        ax.axhline(targets[label], color=color, linestyle="--", linewidth=1)
        ax.plot([], [], "-", color=color, label=_label(label))
    lo, hi = interval
    if lo is not None and hi is not None:
        ax.axvspan(lo, hi, color="#dddddd", alpha=0.7, linewidth=0, label="capacity interval")
    if estimate:
        ax.axvline(estimate, color="#333333", linewidth=1, label=f"capacity {estimate:.3g}/s")
    if not rates:
        ax.text(0.5, 0.5, "no trial has ended yet", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.set_xscale("log")
        from matplotlib.ticker import FuncFormatter

        from matplotlib.ticker import LogLocator

        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax.legend(frameon=False, fontsize=8, loc="lower left")
    ax.set_ylim(min([0.5, *[s for pts in series.values() for _, s, _ in pts if s is not None]]) - 0.02, 1.02)
    ax.set_xlabel("arrival rate, requests/s (log)")
    ax.set_ylabel("share of requests within the SLO")
    return _svg(fig, "attainment against the arrival rate")
