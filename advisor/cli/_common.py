"""What every command shares: consoles, options, exit codes, and taking a snapshot."""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from advisor import escape
from advisor.option_help import ENGINE_CREDENTIALS_HELP, PROM_CREDENTIALS_HELP
from advisor.errors import AdvisorError
from probes.redaction import redact_text

if TYPE_CHECKING:
    from probes import Snapshot

# A pipe or CI log gets a fixed, readable width instead of rich's 80-column fallback.
out = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 140)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 140)

EXIT_OK, EXIT_FOUND, EXIT_FAILED, EXIT_INTERNAL = 0, 1, 2, 3


class Output(str, Enum):
    text = "text"
    json = "json"


class ReportFormat(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


PromUrl = Annotated[Optional[str], typer.Option("--prom-url", help="Prometheus server that scrapes the deployment, e.g. http://127.0.0.1:9090. " + PROM_CREDENTIALS_HELP)]
EngineUrl = Annotated[Optional[str], typer.Option("--url", help="An engine's base URL; its /metrics is sampled directly, without Prometheus. " + ENGINE_CREDENTIALS_HELP)]
Window = Annotated[Optional[str], typer.Option("--window", help="How far back to look (Prometheus) or how long to sample (--url): 30s, 5m, 1h. Default: $ADVISOR_WINDOW, else 60s. Reading stops after at most the window (--url) plus 6 x $ADVISOR_TIMEOUT (10s) plus 10s.")]
Model = Annotated[Optional[str], typer.Option("--model", help="Only this served model's series (the engine's model label).")]
At = Annotated[Optional[str], typer.Option("--at", help="Evaluate at this time (RFC 3339 or unix seconds) instead of now; Prometheus only.")]
PricePerHour = Annotated[Optional[str], typer.Option("--price-per-hour", help="Price of one accelerator for an hour (2.5), or of the host for a CPU deployment (0.8/host): adds $ per million output tokens and per thousand SLO-meeting requests. Default: the deployment spec's cost:, else advisor.yaml's; none, no cost shown.")]
Engine = Annotated[Optional[str], typer.Option("--engine", help="Skip detection and read this dialect: vllm, sglang, tgi, llamacpp, trtllm, triton.")]


def positive_finite(value: float | None) -> float | None:
    """Option callback for a rate: a finite number above zero (typer's min= is inclusive)."""
    import math

    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a finite number above 0, got {value}")
    return value


def check_store_early(save: bool) -> None:
    """With --save, open the store (create, migrate) before anything runs: an unwritable data dir
    or a bad ADVISOR_DB_URL is one line now, not a lost result later."""
    if not save:
        return
    from advisor.settings import get_settings
    from advisor.store import StoreError, open_store

    try:
        open_store(get_settings().database_url).close()
    except StoreError as e:
        raise fail(str(e)) from None


def fail(message: str) -> typer.Exit:
    """One line on stderr, exit 2. The message may hold text from a target or a file: escaped here."""
    # soft_wrap: a long line stays one line (the terminal wraps it), never broken into two by rich.
    err.print(f"[red]error:[/] {escape.markup(escape.one_line(redact_text(message), 2000))}", highlight=False,
              soft_wrap=True)
    return typer.Exit(EXIT_FAILED)


def take_snapshot(prom_url: str | None, url: str | None, window: str | None, model: str | None,
                  at: str | None, engine: str | None, per_replica: bool | set[str] = True) -> Snapshot:
    """The snapshot service with the terminal's progress; every failure one line and exit 2."""
    from advisor.app.snapshot import Source, take

    def progress(target: str, done: float, total: float) -> None:
        err.print(f"[dim]sampling {escape.markup(target)}/metrics: {done:.0f}/{total:.0f}s[/]", highlight=False)

    try:
        return take(Source(prom_url=prom_url, url=url, window=window, model=model, at=at, engine=engine),
                    per_replica=per_replica, progress=progress)
    except AdvisorError as e:
        raise fail(str(e)) from None


class Baseline(str, Enum):
    """The baseline arm of an experiment with parallel local arms (LocalLauncher's `baseline`)."""

    auto = "auto"
    fresh = "fresh"
    found = "found"
