"""View models of the reports: every number a report or a page shows is formatted here once, from
the typed results, so that the HTML report, the dashboard and the weekly report agree.

Nothing here escapes: values stay as they came (model names, labels, rule text are untrusted) and
each medium escapes them its own way (HTML by jinja2's autoescape, markdown by its finalize).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from dataclasses import asdict
from datetime import datetime

from markupsafe import Markup

from advisor import escape
from advisor.cost import cost_text
from advisor.diagnosis.model import CheckSkip, Diagnosis, ExperimentRef
from advisor.experiments.arms.engine_readouts import fmt as readout_fmt
from advisor.experiments.design import readouts
from advisor.experiments.result import BucketResult, ExperimentResult, MetricResult
from advisor.reports import charts
from advisor.verdict import interval_text, level_text, ratio_text
from advisor.units import fmt as with_unit
from probes.catalog import signal_unit


def when(t: datetime | None) -> str:
    return "-" if t is None else t.strftime("%Y-%m-%d %H:%M:%S UTC")


def restored_text(restored: bool | None) -> str:
    return {True: "restored and healthy", False: "NOT restored", None: "-"}[restored]


@dataclass
class MetricRow:
    name: str
    role: str  # primary | secondary
    baseline: str
    candidate: str
    ratio: str
    ci: str
    level: str
    verdict: str
    reason: str
    adjusted_p: str = "-"
    method: str = ""


@dataclass
class BlockRow:
    position: int
    arm: str
    block: int
    requests: int
    ok: int
    errors: int
    ttft_p50: str
    tpot_p50: str
    e2e_p95: str
    valid: bool
    why_invalid: str | None
    restart: str
    warmup: str = "-"
    outside: str = "-"  # requests the arm's engine finished that the advisor did not send


@dataclass
class ServerRowView:
    signal: str
    baseline: str
    candidate: str
    change: str  # "x3.8", "-" where either arm has no value or the baseline is zero
    watched: bool


@dataclass
class BucketRow:
    bucket: str
    requests: str  # "baseline / candidate"
    ttft: str  # "0.52 [0.40, 0.61] improved"
    tpot: str


@dataclass
class NoiseRow:
    readout: str
    block_sd: str
    sampling_sd: str
    drift_sd: str
    blocks: int


@dataclass
class CapacityArmRow:
    arm: str
    summary: str  # the answer in one line, with its interval
    status: str
    trials: int
    requests: int
    seconds: str
    goodput: str  # at the highest rate that held
    chart: Markup | None = None  # the arm's attainment curve
    tried: str = ""  # every trial in run order: "2.68/s pass; 5.35/s unclear (x3) ..."


def _capacity_rows(r: ExperimentResult, charts_on: bool) -> list[CapacityArmRow]:
    rows = []
    for arm, c in r.capacity.items():
        rows.append(CapacityArmRow(arm, c.summary, c.status, len(c.trials), c.requests, f"{c.seconds:.0f} s",
                                   "-" if c.goodput_at_low is None else f"{c.goodput_at_low:.3g}/s",
                                   charts.attainment_of(c) if charts_on else None,
                                   "; ".join(f"{t.rate:.3g}/s {t.outcome if t.valid else 'invalid'}"
                                             + (f" (x{t.extended + 1})" if t.extended else "") for t in c.trials)))
    return rows


@dataclass
class ExperimentView:
    key: str
    deployment: str
    mechanism: str
    value: str
    status: str
    verdict: str
    primary: str
    ratio: str
    ci: str
    level: str
    stop_reason: str | None
    reason: str | None
    restored: str
    restore_note: str | None
    aborted: str | None
    fails_means: str | None
    metrics: list[MetricRow]
    blocks: list[BlockRow]
    looks: list[dict]
    design: list[str]
    manifest_json: str
    forest_svg: Markup | None
    blocks_svg: Markup | None
    id: int | None = None
    diagnosis_id: int | None = None
    created: str = "-"
    title: str = ""  # "max_num_seqs -> 8", or what an A/A run is
    server: list[ServerRowView] = field(default_factory=list)
    server_notes: list[str] = field(default_factory=list)
    quality: str | None = None
    calibration: list[NoiseRow] = field(default_factory=list)
    manifest_line: str | None = None  # the manifest in one line, for the terminal
    buckets: list[BucketRow] = field(default_factory=list)
    cost: str | None = None  # both arms' cost per output token and the candidate's ratio, or why not
    models: list[tuple[str, str]] = field(default_factory=list)  # a model-file swap: (arm, its four layers)
    memory: str | None = None  # both arms' resident memory
    explanation: str | None = None  # the map's reading of a failure (dequantization ate the gain)
    outcome: VerdictParts | None = None  # the verdict as a diagnosis' check shows it; None while it runs
    capacity: list[CapacityArmRow] = field(default_factory=list)  # a capacity experiment: each arm's search


def _metric_rows(metrics: list[MetricResult]) -> list[MetricRow]:
    rows = []
    for i, m in enumerate(metrics):
        rows.append(MetricRow(f"{m.metric} {m.statistic}", "primary" if i == 0 else "secondary",
                              _readout_value(m, m.baseline_value), _readout_value(m, m.candidate_value),
                              ratio_text(m.ratio), interval_text(m.ci), level_text(m.level), m.verdict, m.reason, "-" if m.adjusted_p is None else f"{m.adjusted_p:.3g}", m.method))
    return rows


def _readout_value(m: MetricResult, v: float | None) -> str:
    if v is None:
        return "-"
    if m.statistic == "per_s":  # a block readout, or the capacity: a rate
        return f"{v:.4g}/s"
    if not readouts.is_block_readout(m.metric, m.statistic):
        return _seconds(v)  # every per-request readout is a latency
    return f"{v:.4g}/s" if m.statistic == "per_s" else f"{v:.4g}"


def _seconds(v: float | None) -> str:
    if v is None:
        return "-"
    ms = v * 1000
    return (f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms") if ms < 999.5 else f"{v:.3g} s"


def experiment_title(mechanism: str, value: str) -> str:
    """What an experiment changed, "max_num_seqs -> 8"; an A/A run changes nothing and says so."""
    return "A/A run (the baseline against itself)" if mechanism == "aa" else f"{mechanism} -> {value}"


# Units a server value is unreadable without (19.7 could be seconds or a count; 0.0012 a share);
# a count or a rate already names its unit in the signal's name.
_SHOWN_UNITS = ("s", "ratio", "percent", "bytes")


def _server_rows(r: ExperimentResult) -> list[ServerRowView]:
    def change(b: float | None, c: float | None) -> str:
        return "-" if b is None or c is None or b == 0 else f"x{c / b:.3g}"

    def shown(signal: str, v: float | None) -> str:
        try:
            unit = signal_unit(signal)
        except KeyError:
            unit = None
        return with_unit(v, unit) if unit in _SHOWN_UNITS and v is not None else readout_fmt(v)

    return [ServerRowView(x.signal, shown(x.signal, x.baseline), shown(x.signal, x.candidate),
                          change(x.baseline, x.candidate), x.watched) for x in r.server]


def _bucket_rows(buckets: list[BucketResult]) -> list[BucketRow]:
    def cell(m: MetricResult | None) -> str:
        if m is None:
            return "-"
        return f"{ratio_text(m.ratio)} {interval_text(m.ci)} {m.verdict}".replace("- - ", "")

    rows = []
    for b in buckets:
        by = {m.metric: m for m in b.metrics}
        rows.append(BucketRow(b.bucket, f"{b.requests[0]} / {b.requests[1]}", cell(by.get("ttft")), cell(by.get("tpot"))))
    return rows


def _manifest_line(m: dict) -> str | None:
    if not m or "deployment" not in m:
        return None
    hw = m.get("hardware", {})
    work = m.get("workload", {})
    machine = (f"{hw.get('cpu')} x{hw.get('cores')}, {', '.join(hw.get('gpus') or []) or 'no GPU'}" if "cpu" in hw
               else "arms on other hosts")
    engine = " ".join(str(x) for x in (m["deployment"].get("engine"), m.get("engine_version")) if x)
    replicas = m.get("replicas") or {}
    arms = (f"; replicas baseline {replicas.get('baseline')}, candidate {replicas.get('candidate')}" if replicas
            else "")
    return (f"{engine}, model {m['deployment'].get('model')}, {machine}{arms}; workload "
            f"{work.get('name')} ({m.get('concurrency_or_rate')}, seed {(m.get('seeds') or {}).get('workload')}); "
            + (f"blocks {' '.join(m['block_order'])}" if m.get("block_order") else
               "trials " + ", ".join(f"{arm} {x.get('trials')}" for arm, x in (m.get("per_arm") or {}).items())))


def experiment_view(result: ExperimentResult | None, *, key: str = "", deployment: str = "", mechanism: str = "",
                    value: str = "", status: str | None = None, design: dict | None = None,
                    running_blocks: list | None = None, ident: int | None = None, diagnosis_id: int | None = None,
                    created: datetime | None = None, charts_on: bool = True) -> ExperimentView:
    """From a finished (or interrupted) result; or, while it runs, from its design and the blocks
    stored so far (running_blocks: store LoadRunSummary rows)."""
    design_lines = list((design or {}).get("lines", []))
    if result is None:
        blocks = [BlockRow(i + 1, b.arm or "-", (b.block or 0) + 1, b.requests, b.ok, b.errors, "-", "-", "-",
                           b.valid, b.why_invalid, "-") for i, b in enumerate(running_blocks or [])]
        return ExperimentView(key, deployment, mechanism, value, status or "running", "-", "-", "-", "-", "-",
                              None, None, "-", None, None, None, [], blocks, [], design_lines, "{}", None, None,
                              ident, diagnosis_id, when(created), title=experiment_title(mechanism, value))
    r, j = result, result.judgement  # the judgement stored with the result: shown, never recomputed
    blocks = [BlockRow(i + 1, b.arm, b.block + 1, b.requests, b.ok, b.errors, _seconds(b.ttft_p50),
                       _seconds(b.tpot_p50), _seconds(b.e2e_p95), b.generator_valid, b.why_invalid,
                       "-" if b.restart_s is None else f"{b.restart_s:.1f} s", str(b.warmup_requests or "-"),
                       "-" if not b.server or b.server.outside_requests is None else str(b.server.outside_requests))
              for i, b in enumerate(r.blocks)]
    forest_svg = blocks_svg = None
    if charts_on:
        margin = j.metrics[0].margin if j.metrics else 0.05
        forest_svg = charts.forest([(f"{m.metric} {m.statistic}" + (" (primary)" if i == 0 else ""), m.ratio, m.ci,
                                     m.verdict) for i, m in enumerate(j.metrics)], margin=margin)
        blocks_svg = charts.blocks([(i + 1, b.arm, b.ttft_p50, b.generator_valid) for i, b in enumerate(r.blocks)],
                                   "TTFT p50 per block (s)")
    looks = [{"blocks": look.blocks, "level": level_text(1 - look.alpha), "verdict": look.verdict,
              "ratio": ratio_text(look.ratio), "ci": interval_text(look.ci), "requests": look.requests or "-",
              "reason": look.reason or ""}
             for look in j.looks]
    return ExperimentView(
        key=r.id, deployment=r.deployment, mechanism=r.mechanism, value=r.value, status=status or r.status,
        verdict=j.verdict, primary=j.primary_metric, ratio=ratio_text(j.ratio), ci=interval_text(j.ci),
        level=level_text(j.level), stop_reason=j.stop_reason, reason=j.reason,
        restored=restored_text(r.baseline_restored), restore_note=r.restore_note, aborted=r.aborted,
        fails_means=r.fails_means, metrics=_metric_rows(j.metrics), blocks=blocks, looks=looks, design=design_lines,
        manifest_json=escape.json_text(r.manifest), forest_svg=forest_svg, blocks_svg=blocks_svg, id=ident,
        diagnosis_id=diagnosis_id, created=when(created), title=experiment_title(r.mechanism, r.value),
        server=_server_rows(r), server_notes=list(r.server_notes), quality=quality_text(j.quality),
        calibration=[NoiseRow(f"{n.metric} {n.statistic}", f"{n.block_sd:.3f}", f"{n.sampling_sd:.3f}",
                              f"{n.drift_sd:.3f}", n.blocks) for n in r.calibration or []],
        manifest_line=_manifest_line(r.manifest), buckets=_bucket_rows(j.buckets),
        cost=cost_text(j.cost, j.cost_note), models=[(arm, m.line()) for arm, m in r.models.items()],
        memory=memory_text(j.memory), explanation=j.explanation, outcome=_outcome(r),
        capacity=_capacity_rows(r, charts_on))


def experiment_views(results: Sequence[ExperimentResult], charts_on: bool = True) -> list[ExperimentView]:
    return [experiment_view(r, charts_on=charts_on) for r in results]


def quality_text(q) -> str | None:
    if q is None:
        return None
    return (f"{q.prompts} prompts, {q.exact_match:.0%} identical greedy outputs, {q.token_agreement:.0%} of the "
            f"baseline's tokens reproduced before the first divergence; {q.note}")


def memory_text(m) -> str | None:
    if m is None:
        return None

    def mib(b: int | None) -> str:
        return "-" if b is None else f"{b / 2**20:,.1f} MiB"

    def pair(b: int | None, c: int | None, r: float | None) -> str:
        return f"baseline {mib(b)}, candidate {mib(c)}" + (f" (x{r:.3g})" if r is not None else "")

    text = f"{pair(m.baseline_bytes, m.candidate_bytes, m.ratio)} (RSS of each arm's engine processes after its blocks)"
    if m.baseline_weights_bytes is not None or m.candidate_weights_bytes is not None:
        text += (f"; of it, the mapped model file: "
                 f"{pair(m.baseline_weights_bytes, m.candidate_weights_bytes, m.weights_ratio)}")
    if m.baseline_gpu_bytes is not None or m.candidate_gpu_bytes is not None:
        text += f"; GPU memory (NVML): {pair(m.baseline_gpu_bytes, m.candidate_gpu_bytes, m.gpu_ratio)}"
    return text


@dataclass
class EvidenceRow:
    text: str
    source: str


@dataclass
class FindingView:
    rule_id: str
    name: str
    symptom: str
    severity: str
    layer: str
    map_row: str
    evidence: list[EvidenceRow]
    chart_svg: Markup | None = None


@dataclass
class VerdictParts:
    """An experiment's verdict as a diagnosis' check shows it: the verdict, and the rest of its one
    line (`detail`), which every medium prints as it is; with the parts a medium shows beside it."""

    verdict: str
    detail: str  # "on ttft p95, ratio 0.50, 95 % CI [0.40, 0.60]; stopped: decisive at look 2 ..."
    experiment: str
    value: str = ""  # the candidate's value
    status: str = ""
    restored: str = "-"
    looks: int = 0
    requests: int = 0  # sent to both arms by the last look
    workload: str | None = None
    why: str | None = None  # the reason, shown for an inconclusive or overruled verdict
    fails_means: str | None = None  # shown for a regressed or unchanged verdict

    @property
    def line(self) -> str:
        return f"{self.verdict} {self.detail}".rstrip()


def _outcome(r: ExperimentResult) -> VerdictParts:
    """The one place a verdict line is written, from the judgement stored with the result."""
    j = r.judgement
    why = j.reason if j.verdict == "inconclusive" or j.overrule is not None else None
    detail = f"on {j.primary_metric}"
    if j.ratio is not None:
        detail += f", ratio {ratio_text(j.ratio)}, {level_text(j.level)} CI {interval_text(j.ci)}"
    if why:
        detail += f" ({why})"
    if j.stop_reason:
        detail += f"; stopped: {j.stop_reason}"
    return VerdictParts(j.verdict, detail, r.id, value=r.value, status=r.status,
                        restored=restored_text(r.baseline_restored), looks=len(j.looks),
                        requests=sum(look.requests or 0 for look in j.looks[-1:]),
                        workload=(r.manifest.get("workload") or {}).get("source"), why=why,
                        fails_means=r.fails_means if j.verdict in ("regressed", "no change") else None)


def _unread(ref: ExperimentRef) -> VerdictParts:
    """A check's experiment whose result is not at hand (not given, or not in the store)."""
    return VerdictParts(ref.verdict, f"(experiment {ref.experiment}: its result is not at hand)", ref.experiment)


@dataclass
class CheckRow:
    rank: int
    title: str
    rule_id: str
    mechanism: str
    direction: str
    score: str
    reason: str
    look_at: str
    held_back: bool
    already: str | None
    verdict: str  # one line: the verdict, or why not tested, or "-"
    experiment: str | None
    outcome: VerdictParts | None = None  # the verdict's parts, for media that style them
    skipped: str | None = None  # why the check was not tested
    check_id: str = ""


@dataclass
class DiagnosisView:
    title: str
    target: str
    via: str
    engine: str  # kind and version
    model: str | None
    window: str
    taken_at: str
    slo: str
    healthy: bool
    top_severity: str
    status_line: str
    findings: list[FindingView]
    checks: list[CheckRow]
    not_evaluated: list[tuple[str, str]]
    problems: list[str]
    experiments: list[ExperimentView] = field(default_factory=list)
    id: int | None = None
    deployment: str | None = None
    models: list[str] = field(default_factory=list)  # the engine's served models
    model_line: str | None = None  # the served model's structure and KV cost, or why it is unknown
    tokenization_line: str | None = None  # the target's tokenization timed, or why it was not
    cost_line: str | None = None  # $ per million output tokens and per thousand SLO-meeting requests
    trigger_line: str | None = None  # what started it: an Alertmanager notification's alerts
    trigger_url: str | None = None  # those alerts in Alertmanager (http or https only)


def model_line(d: Diagnosis) -> str | None:
    m = d.model_structure
    if m is None:
        return f"structure unknown: {d.model_note}" if d.model_note else None
    kv = f"KV cache {with_unit(d.kv_bytes_per_token, 'bytes')} per token" if d.kv_bytes_per_token else \
        "KV bytes per token unknown (the KV cache dtype is not known)"
    cap = f", capacity {d.kv_capacity_tokens:,} tokens" if d.kv_capacity_tokens else ""
    return f"{m.describe()}; {kv}{cap} (from {m.source})"


def tokenization_line(d: Diagnosis) -> str | None:
    if d.tokenization is not None:
        return d.tokenization.summary()
    return f"not measured: {d.tokenization_note}" if d.tokenization_note else None


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else None


def _evidence_chart(f) -> Markup | None:
    rows = [(ev.signal, _number(ev.value), _number(ev.threshold)) for ev in f.evidence]
    rows = [(name, v, t) for name, v, t in rows if v is not None and t]
    return charts.evidence(rows, f"{f.rule_id} {f.symptom}") if rows else None


def diagnosis_view(d: Diagnosis, *, ident: int | None = None, deployment: str | None = None,
                   experiments: Sequence[ExperimentView] = (), charts_on: bool = True) -> DiagnosisView:
    """The diagnosis, each tested check with its experiment's view from `experiments` (the stored
    results, or those just run: `experiment_views`)."""
    e = d.engine
    by_key = {x.key: x for x in experiments}
    checks = []
    for c in d.checks:
        outcome = skipped = None
        if isinstance(c.verdict, ExperimentRef):
            x = by_key.get(c.verdict.experiment)
            outcome = x.outcome if x is not None and x.outcome is not None else _unread(c.verdict)
            line = outcome.line
        elif isinstance(c.verdict, CheckSkip):
            skipped = c.verdict.skipped
            line = f"not tested: {skipped}"
        else:
            line = "-"
        checks.append(CheckRow(c.rank, c.title, c.rule_id, c.mechanism, c.direction or "", f"{c.score:.2f}", c.reason,
                               c.look_at, c.held_back, c.already, line, outcome.experiment if outcome else None,
                               outcome, skipped, c.id))
    status = "healthy: no rule fired" if not d.findings else d.summary
    return DiagnosisView(
        title=f"Diagnosis of {d.target}", target=d.target, via=d.via,
        engine=" ".join(x for x in (e.kind or "unknown engine", e.version or "") if x), model=d.model,
        window=f"{d.window_s:.0f} s", taken_at=when(d.taken_at),
        slo=", ".join(f"{k} {v:g}" for k, v in d.slo.items() if v is not None), healthy=d.healthy,
        top_severity=d.top_severity, status_line=status,
        findings=[FindingView(f.rule_id, f.name, f.symptom, f.severity, f.layer, f.map_row,
                              [EvidenceRow(ev.text, ev.source) for ev in f.evidence],
                              _evidence_chart(f) if charts_on else None) for f in d.findings],
        checks=checks, not_evaluated=[(x.rule_id, x.reason) for x in d.not_evaluated], problems=list(d.problems),
        experiments=list(experiments), id=ident, deployment=deployment, models=list(e.models),
        model_line=model_line(d), tokenization_line=tokenization_line(d), cost_line=cost_text(d.cost, d.cost_note),
        trigger_line=(f"an Alertmanager notification: {', '.join(d.trigger.alerts) or 'alerts'} firing"
                      if d.trigger else None),
        trigger_url=d.trigger.url if d.trigger and (d.trigger.url or "").startswith(("http://", "https://")) else None)


def as_json(view) -> str:
    """A view as JSON (charts left out): what the API returns beside a page."""

    def clean(x):
        if isinstance(x, Markup):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if not k.endswith("_svg")}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(asdict(view)), ensure_ascii=False)
