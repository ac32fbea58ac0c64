"""advisor model: what a model's files say about it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import Output, fail, out

model_app = typer.Typer(help="A model's files: its weights in the optimisation map's four layers.", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("inspect")
def model_inspect(
    path: Annotated[Path, typer.Argument(help="A safetensors checkpoint (its folder, with config.json, or one .safetensors file) or a GGUF file (or a folder holding one).")],
    output: Annotated[Output, typer.Option("--output", "-o", help="text for people, json for machines.")] = Output.text,
) -> None:
    """The container, each tensor's numeric format, the weight-encoding recipe, and which roles got
    which format (by layer where they differ), with the actual bits per weight from byte sizes
    (never from the name) and the calibration data or imatrix the file records. Headers only: no
    weight is loaded.

    Exit codes: 0 read, 2 not readable (no such path, a truncated file, a wrong magic, a header that lies about sizes, an unknown tensor type).
    """
    from advisor.errors import AdvisorError
    from advisor.models.inspect import inspect

    try:
        result = inspect(path)
    except AdvisorError as e:
        raise fail(str(e)) from None
    if output is Output.json:
        print(escape.json_text(result.model_dump(mode="json")))
    else:
        out.print(escape.markup(result.text()), highlight=False)
