"""What every request handler shares, handed over as FastAPI dependencies (Annotated types)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request

from advisor.app.alerts_in import AlertIntake
from advisor.app.alerts_out import AlertsOut
from advisor.app.watched import ExperimentRuns
from advisor.ranges import STORE_ID_MAX
from advisor.fleet.config import FleetConfig, WatchedDeployment
from advisor.store import Store


@dataclass
class Context:
    config: FleetConfig
    store: Store
    store_url: str
    token: str | None
    loopback: bool
    runs: ExperimentRuns
    alerts: AlertIntake = field(default_factory=AlertIntake)
    alerts_out: AlertsOut | None = None  # findings posted to Alertmanager (advisor.yaml alertmanager.url)


def get_context(request: Request) -> Context:
    return request.app.state.context


Ctx = Annotated[Context, Depends(get_context)]


def watched(name: str, ctx: Ctx) -> WatchedDeployment:
    """The deployment named in the path, only if advisor.yaml names it: the allowlist."""
    found = ctx.config.get(name)
    if found is None:
        raise HTTPException(404, f"no deployment {name!r} in advisor.yaml")
    return found


Watched = Annotated[WatchedDeployment, Depends(watched)]

# The store's ids are SQLite's signed 64-bit integers: a larger one would overflow in the driver
# (a 500) before any row is looked up. Validated before any query; the app answers a path id
# outside this range, or no integer at all, with 404.
MAX_ID = STORE_ID_MAX
StoreId = Annotated[int, Path(ge=1, le=MAX_ID, description="a stored id, 1 to 2**63-1")]
