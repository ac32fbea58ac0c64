"""advisor probe: one snapshot of a deployment's signals."""

from __future__ import annotations

from typing import Annotated

import typer

from advisor.cli._app import app
from advisor.cli._common import At, Engine, EngineUrl, Model, Output, PromUrl, Window, out, take_snapshot


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
        from advisor.escape import json_text

        print(json_text(snap.model_dump(mode="json")))
    else:
        from advisor.reports.snapshot_text import render

        render(snap, out, show_all=show_all)
