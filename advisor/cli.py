"""The `advisor` command. Results go to stdout; logs and progress to stderr."""

from __future__ import annotations

import logging
import sys
from enum import Enum
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
out = Console(soft_wrap=False)
err = Console(stderr=True)

EXIT_OK, EXIT_FOUND, EXIT_FAILED = 0, 1, 2


class Output(str, Enum):
    text = "text"
    json = "json"


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()
