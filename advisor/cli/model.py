"""advisor model: what a model's files say about it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor import escape
from advisor.cli._app import app
from advisor.cli._common import Output, fail, out

model_app = typer.Typer(help="A model's files: its weights in the optimisation map's four layers.", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("inspect")
def model_inspect(
    path: Annotated[Optional[Path], typer.Argument(help="A safetensors checkpoint (its folder, with config.json, or one .safetensors file) or a GGUF file (or a folder holding one).")] = None,
    url: Annotated[Optional[str], typer.Option("--url", help="An engine on this host: the model it serves (vLLM's /v1/models root, llama.cpp's /props model_path).")] = None,
    deployment: Annotated[Optional[Path], typer.Option("--deployment", help="A deployment spec: the model its engine command serves (--model, -m, or vLLM's serve MODEL).")] = None,
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
        if sum(x is not None for x in (path, url, deployment)) != 1:
            raise AdvisorError("give one of PATH, --url or --deployment")
        result = inspect(path if path is not None else _served(url, deployment))
    except AdvisorError as e:
        raise fail(str(e)) from None
    if output is Output.json:
        print(escape.json_text(result.model_dump(mode="json")))
    else:
        out.print(escape.markup(result.text()), highlight=False)


def _served(url: str | None, deployment: Path | None) -> Path:
    from advisor.models.locate import model_args, served_weights, weights_path
    from advisor.models.structure import ModelConfigError

    if url is not None:
        from advisor import net

        engine, _ = net.target(url, "engine", "--url")
        name, source = served_weights(engine)
    else:
        from advisor.experiments.design.deployment import load_deployment
        from advisor.knobs import model_flags

        dep = load_deployment(deployment)
        found = model_args([*dep.local.command, *dep.local.args], model_flags(dep.engine)) if dep.local is not None else None
        name, source = found or dep.model, f"{deployment}"
    path = weights_path(name)
    if path is None:
        raise ModelConfigError(f"{source} names the model {name!r}, which is not a file or folder on this host "
                               "(nor a Hugging Face id in its cache)")
    return path
