"""A capacity search's result for a terminal, as markdown and as an HTML page (its chart inline)."""

from __future__ import annotations

from advisor import escape
from advisor.capacity.result import CapacityResult, percentile_text
from advisor.reports import charts


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def plan_line(r: CapacityResult) -> str:
    p = r.plan
    if p is None:
        return ""
    lo, hi = p.replicas_range
    rng = f"{lo} to {hi}" if hi is not None else f"at least {lo}"
    line = (f"{p.replicas} replica(s) at {p.headroom:.0%} of the capacity's estimate ({rng} over its interval)")
    if p.monthly_cost is not None:
        cur = "$" if p.currency == "USD" else f"{p.currency} "
        lo_c, hi_c = p.monthly_cost_range
        line += (f"; {cur}{p.monthly_cost:,.0f} a month at {cur}{p.per_hour:g} per unit-hour x {p.units_per_replica} "
                 f"per replica ({cur}{lo_c:,.0f} to " + (f"{cur}{hi_c:,.0f})" if hi_c is not None else "unknown)"))
        if p.per_million_output_tokens is not None:
            line += f"; {cur}{p.per_million_output_tokens:,.2f} per million output tokens at capacity"
    return line


def _trial_rows(r: CapacityResult) -> list[list[str]]:
    rows = []
    for t in r.trials:
        cells = [_rate(t.rate), t.outcome + (f" ({t.decided_by})" if t.decided_by else "")
                 + ("" if t.valid else " invalid")]
        for o in r.objectives:
            s = t.shares.get(o.name)
            cells.append("-" if s is None else f"{s:.1%}{percentile_text(o.share, t.percentiles.get(o.name))}")
        cells += [_rate(t.goodput_rps), str(t.requests)]
        rows.append(cells)
    return rows


def _head(r: CapacityResult) -> list[str]:
    return ["rate/s", "outcome", *[o.label for o in r.objectives], "goodput/s", "requests"]


def text(r: CapacityResult) -> str:
    e = escape.plain
    out = [f"Capacity of {e(r.target)} (model {e(r.model)}, workload {e(r.workload)})", "",
           f"  {r.summary}",
           f"  objectives: {'; '.join(o.label for o in r.objectives)}",
           f"  {r.requests} requests, {r.seconds:.0f} s, {len(r.trials)} trials"]
    if r.goodput_at_low is not None:
        out.append(f"  goodput at the highest rate that held: {r.goodput_at_low:.3g} requests/s within every SLO")
    if r.stopped and r.status == "partial":
        out.append(f"  stopped early: {e(r.stopped)}")
    for n in r.notes:
        out.append(f"  note: {e(n)}")
    if r.plan:
        out.append(f"  peak {r.plan.peak_rps:.3g} requests/s: {plan_line(r)}")
    head, rows = _head(r), _trial_rows(r)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    out += ["", "  " + "  ".join(h.rjust(w) for h, w in zip(head, widths))]
    out += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out) + "\n"


def markdown(r: CapacityResult) -> str:
    e = escape.markdown
    out = [f"# Capacity at the SLO: {e(r.target)}", "",
           f"Model {e(r.model)}, workload {e(r.workload)}; {r.requests} requests in {r.seconds:.0f} s.", "",
           f"**{r.summary}**", "",
           f"Objectives: {'; '.join(o.label for o in r.objectives)}."]
    if r.goodput_at_low is not None:
        out.append(f"Goodput at the highest rate that held: {r.goodput_at_low:.3g} requests/s.")
    if r.stopped and r.status == "partial":
        out.append(f"Stopped early: {e(r.stopped)}.")
    out += [f"Note: {e(n)}." for n in r.notes]
    if r.plan:
        out += ["", f"## Planning for a peak of {r.plan.peak_rps:.3g} requests/s", "", plan_line(r)]
    head = _head(r)
    out += ["", "## Trials", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in _trial_rows(r)]
    return "\n".join(out) + "\n"


def html(r: CapacityResult, dashboard: bool = False, deployment: str | None = None) -> str:
    """The page; on the dashboard with its navigation and a link back to the deployment's page."""
    from advisor.reports.html import render

    return render("capacity.html.j2", r=r, chart=charts.attainment_of(r), plan_line=plan_line(r),
                  dashboard=dashboard, deployment=deployment)
