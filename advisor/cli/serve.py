"""advisor serve: the dashboard, its JSON API, and the schedule of advisor.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import err, fail
from advisor.errors import AdvisorError


@app.command()
def serve(
    config: Annotated[Optional[Path], typer.Option("--config", help="advisor.yaml: the deployments to watch (the allowlist of every page and action). Default: $ADVISOR_CONFIG.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on. Anything but loopback needs ADVISOR_API_TOKEN, and then every page asks for it.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")] = 8080,
    schedule: Annotated[bool, typer.Option("--schedule/--no-schedule", help="Run advisor.yaml's schedule: diagnose_every per deployment, weekly_report at its cron time.")] = True,
) -> None:
    """The web dashboard: the fleet at /, each deployment's diagnoses and experiments, live
    experiment pages, the rules catalog, report downloads; a JSON API under /api (schema at
    /openapi.json); and the schedule.

    Actions (diagnose now, start an experiment) need ADVISOR_API_TOKEN, sent as
    'Authorization: Bearer ...'; without it they are disabled and say so. A request body over
    ADVISOR_MAX_BODY_BYTES (default 4 MiB) is refused with 413 before its token is checked. Stop
    with Ctrl-C: running experiments restore their baselines first."""
    from advisor.web.serve import serve as run

    try:
        run(config, host=host, port=port, schedule=schedule,
            say=lambda m: err.print(escape.markup(m), highlight=False))
    except AdvisorError as e:
        raise fail(str(e)) from None
