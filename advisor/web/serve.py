"""The dashboard, its JSON API and advisor.yaml's schedule, served until stopped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from advisor.app.alerts_out import alerts_out_for
from advisor.fleet.config import load_config
from advisor.schedule import Scheduler
from advisor.settings import get_settings
from advisor.web import create_app
import logging


def _quiet(_: str) -> None:
    return None


def serve(config: Path | None, *, host: str = "127.0.0.1", port: int = 8080, schedule: bool = True,
          token: str | None = None, say: Callable[[str], None] = _quiet) -> None:
    """Serves until SIGINT or SIGTERM; then the schedule stops and every experiment started from the
    dashboard restores its baseline before this returns. token: the API token for actions (default
    ADVISOR_API_TOKEN). Raises AdvisorError (one line) before listening when it cannot serve."""

    import uvicorn


    settings = get_settings()
    if token is None and settings.api_token:
        token = settings.api_token.get_secret_value()
    cfg = load_config(config)
    # One poster for the schedule and the dashboard: it remembers what it posted, to end it.
    alerts_out = alerts_out_for(cfg)
    scheduler = Scheduler(cfg, settings.database_url, alerts_out=alerts_out) if schedule else None
    web = create_app(cfg, store_url=settings.database_url, token=token, host=host, scheduler=scheduler,
                     max_body_bytes=settings.max_body_bytes, alerts_out=alerts_out)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # What became of each Alertmanager notification (started, dropped within the interval, not a
    # deployment here) is the server's record of it, whatever ADVISOR_LOG_LEVEL quiets otherwise.
    logging.getLogger("advisor.alertmanager").setLevel(logging.INFO)
    n = len(cfg.deployments)
    say(f"advisor serve on http://{host}:{port}/ watching {n} deployment{'s' if n != 1 else ''}; actions "
        + ("enabled (token set)" if token else "disabled (set ADVISOR_API_TOKEN)"))
    uvicorn.run(web, host=host, port=port, log_level="warning", access_log=False)
