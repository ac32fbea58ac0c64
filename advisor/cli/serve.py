"""advisor serve: the dashboard, its JSON API, and the schedule of advisor.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.cli._common import err, fail
from advisor.errors import AdvisorError
from advisor.settings import get_settings


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
    'Authorization: Bearer ...'; without it they are disabled and say so. Stop with Ctrl-C: running
    experiments restore their baselines first."""
    import logging

    import uvicorn

    from advisor.fleet.config import load_config
    from advisor.fleet.schedule import Scheduler
    from advisor.web import create_app

    settings = get_settings()
    token = settings.api_token.get_secret_value() if settings.api_token else None
    try:
        cfg = load_config(config)
        scheduler = Scheduler(cfg, settings.database_url) if schedule else None
        web = create_app(cfg, store_url=settings.database_url, token=token, host=host, scheduler=scheduler)
    except AdvisorError as e:
        raise fail(str(e)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    err.print(f"[bold]advisor serve[/] on http://{host}:{port}/ watching {len(cfg.deployments)} deployment"
              f"{'s' if len(cfg.deployments) != 1 else ''}; actions "
              + ("enabled (token set)" if token else "disabled (set ADVISOR_API_TOKEN)"), highlight=False)
    uvicorn.run(web, host=host, port=port, log_level="warning", access_log=False)
