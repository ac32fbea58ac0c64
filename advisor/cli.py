"""The `advisor` command. Results go to stdout; logs and progress to stderr."""

from __future__ import annotations

import json
import logging
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from advisor.settings import get_settings
from advisor.units import parse_duration, parse_time
from probes import ProbeError, Snapshot, probe_engine, probe_prometheus
from probes.errors import BadExposition, CatalogError

app = typer.Typer(
    help="LLM serving advisor: reads a deployment's live metrics, recognises the symptom, ranks the checks "
    "from the optimisation map, and proves them with A/B experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# A pipe or CI log gets a fixed, readable width instead of rich's 80-column fallback.
out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

EXIT_OK, EXIT_FOUND, EXIT_FAILED = 0, 1, 2


class Output(str, Enum):
    text = "text"
    json = "json"


class ReportFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"


PromUrl = Annotated[Optional[str], typer.Option("--prom-url", help="Prometheus server that scrapes the deployment, e.g. http://127.0.0.1:9090.")]
EngineUrl = Annotated[Optional[str], typer.Option("--url", help="An engine's base URL; its /metrics is sampled directly, without Prometheus.")]
Window = Annotated[Optional[str], typer.Option("--window", help="How far back to look (Prometheus) or how long to sample (--url): 30s, 5m, 1h. Default: $ADVISOR_WINDOW, else 60s.")]
Model = Annotated[Optional[str], typer.Option("--model", help="Only this served model's series (the engine's model label).")]
At = Annotated[Optional[str], typer.Option("--at", help="Evaluate at this time (RFC 3339 or unix seconds) instead of now; Prometheus only.")]
Engine = Annotated[Optional[str], typer.Option("--engine", help="Skip detection and read this dialect: vllm, sglang, tgi, llamacpp, trtllm, triton.")]


def fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(EXIT_FAILED)


@app.callback()
def _setup(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug detail to stderr.")] = False) -> None:
    level = logging.DEBUG if verbose else getattr(logging, get_settings().log_level.upper(), logging.WARNING)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


def take_snapshot(prom_url: str | None, url: str | None, window: str | None, model: str | None,
                  at: str | None, engine: str | None) -> Snapshot:
    """One snapshot from exactly one source; every failure becomes a one-line error and exit 2."""
    settings = get_settings()
    if bool(prom_url) == bool(url):
        raise fail("give exactly one of --prom-url (a Prometheus server) or --url (an engine)")
    try:
        window_s = parse_duration(window or settings.window)
        when = parse_time(at) if at else None
    except ValueError as e:
        raise fail(str(e)) from None
    if when and url:
        raise fail("--at needs --prom-url: an engine's /metrics only tells the present")
    try:
        if prom_url:
            return probe_prometheus(prom_url, window_s=window_s, model=model, at=when, engine=engine,
                                    timeout=settings.timeout)

        def progress(done: float, total: float) -> None:
            err.print(f"[dim]sampling {url}/metrics: {done:.0f}/{total:.0f}s[/]", highlight=False)

        return probe_engine(url, window_s=window_s, model=model, engine=engine, timeout=settings.timeout,
                            progress=progress)
    except (ProbeError, BadExposition, CatalogError) as e:
        raise fail(str(e)) from None


@app.command()
def probe(
    prom_url: PromUrl = None,
    url: EngineUrl = None,
    window: Window = None,
    model: Model = None,
    at: At = None,
    engine: Engine = None,
    output: Annotated[Output, typer.Option("--output", "-o", help="text: a readable table; json: every signal with value, unit, source and missing reason.")] = Output.text,
    show_all: Annotated[bool, typer.Option("--all", help="Text output: list every signal, including missing GPU ones.")] = False,
) -> None:
    """Read a deployment's live metrics into one snapshot of signals (TTFT, TPOT, queue, KV cache, GPU...).

    Exit codes: 0 snapshot taken, 2 could not read the target.
    """
    snap = take_snapshot(prom_url, url, window, model, at, engine)
    if output is Output.json:
        print(snap.to_json())
    else:
        from advisor.reports.snapshot_text import render

        render(snap, out, show_all=show_all)


@app.command()
def diagnose(
    prom_url: PromUrl = None,
    url: EngineUrl = None,
    window: Window = None,
    model: Model = None,
    at: At = None,
    engine: Engine = None,
    slo: Annotated[Optional[Path], typer.Option("--slo", help="YAML file of SLOs: ttft_p95, tpot_p95, e2e_p99 (seconds), error_rate (0-1), goodput_min (req/s). Default: ADVISOR_SLO_FILE, else built-in defaults.")] = None,
    rules_config: Annotated[Optional[Path], typer.Option("--rules-config", help="YAML of per-rule overrides: {ADV001: {params: {...}, severity: {thresholds: {...}}, enabled: false}}.")] = None,
    output: Annotated[ReportFormat, typer.Option("--output", "-o", help="text for people, json for machines, markdown for tickets.")] = ReportFormat.text,
    save: Annotated[bool, typer.Option("--save", help="Record this diagnosis in the store (ADVISOR_DB_URL, default SQLite in the data dir) for the dashboard and weekly report.")] = False,
) -> None:
    """Recognise the deployment's symptoms and rank the checks the optimisation map prescribes.

    Exit codes: 0 healthy, 1 symptoms found, 2 could not diagnose (unreachable, no data, bad input).
    """
    from advisor.diagnosis import RuleError, SLOError, diagnose as run_diagnosis, load_overrides, load_rules, load_slo

    settings = get_settings()
    try:
        slo_spec = load_slo(slo or settings.slo_file)
        overrides = load_overrides(rules_config or settings.rules_config) if (rules_config or settings.rules_config) else {}
        rules = load_rules(overrides=overrides)
    except (SLOError, RuleError) as e:
        raise fail(str(e)) from None
    snap = take_snapshot(prom_url, url, window, model, at, engine)
    if not any(s.present for s in snap.signals.values()):
        raise fail(f"{snap.target} returned no data for any signal in the window: nothing to diagnose")
    result = run_diagnosis(snap, rules, slo_spec)
    if save:
        from advisor.store import StoreError, open_store

        try:
            store = open_store(settings.database_url)
            run_id = store.save_diagnosis(result, snap)
            store.close()
        except StoreError as e:
            raise fail(str(e)) from None
        err.print(f"[dim]saved as diagnosis {run_id}[/]")
    if output is ReportFormat.json:
        print(json.dumps({"healthy": result.healthy, "top_severity": result.top_severity,
                          **result.model_dump(mode="json")}, indent=2))
    elif output is ReportFormat.markdown:
        from advisor.reports.markdown import render as render_md

        print(render_md("diagnosis.md.j2", d=result))
    else:
        from advisor.reports.diagnosis_text import render as render_text

        render_text(result, out)
    raise typer.Exit(EXIT_OK if result.healthy else EXIT_FOUND)


rules_app = typer.Typer(help="The rule base: what each rule detects, its evidence, and the settings to change.",
                        no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
def rules_list() -> None:
    """One line per rule: id, layer, symptom."""
    from advisor.diagnosis import RuleError, load_rules

    try:
        rules = load_rules()
    except RuleError as e:
        raise fail(str(e)) from None
    for r in rules:
        out.print(f"[bold]{r.id}[/]  {r.layer:<20} {r.symptom}", highlight=False)


@rules_app.command("show")
def rules_show(rule_id: Annotated[str, typer.Argument(help="A rule id, e.g. ADV001.")]) -> None:
    """A rule's help page: what it detects, the evidence, what to change, its checks and thresholds."""
    from advisor.diagnosis import RuleError, load_rules

    try:
        rules = {r.id: r for r in load_rules()}
    except RuleError as e:
        raise fail(str(e)) from None
    rule = rules.get(rule_id.upper())
    if rule is None:
        raise fail(f"no rule {rule_id!r}; known: {', '.join(rules)}")
    from advisor.reports.markdown import render as render_md

    print(render_md("rule.md.j2", r=rule))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
