"""What every request handler shares, handed over as FastAPI dependencies (Annotated types)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from advisor.fleet.actions import ExperimentRuns
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
