"""advisor deployment: deployment specs written from what a cluster runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from advisor.cli._app import app
from advisor.cli._common import err, fail

deployment_app = typer.Typer(help="Deployment specs: the target an experiment runs against.", no_args_is_help=True)
app.add_typer(deployment_app, name="deployment")


@deployment_app.command("import")
def deployment_import(
    ref: Annotated[str, typer.Argument(help="The live workload: k8s://NAMESPACE/deployment/NAME or k8s://NAMESPACE/statefulset/NAME.")],
    container: Annotated[Optional[str], typer.Option("--container", help="The engine container's name (default: the one whose image or command names an engine).")] = None,
    kubeconfig: Annotated[Optional[str], typer.Option("--kubeconfig", help="Default: the in-cluster service account, then $KUBECONFIG, then ~/.kube/config.")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="A context of the kubeconfig (default: its current one).")] = None,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="The Prometheus that scrapes the target, written into the spec for diagnoses.")] = None,
    url: Annotated[Optional[str], typer.Option("--url", help="Where the target serves for the advisor (its Service URL), to read its /metrics and what it reveals.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the spec here (default: stdout).")] = None,
) -> None:
    """Write a `launcher: kubernetes` deployment spec from the live object: the engine (from the
    container's image and command), the served model, the engine container and its port. The
    object is only read. Its engine args are not copied: every experiment reads them from the
    cluster again, so the spec cannot fall behind a rollout.

    Exit codes: 0 written, 2 the reference, the cluster or the object cannot give a spec.
    """
    import yaml

    from advisor.app.kube_import import KubeImportError, Reference, import_spec

    try:
        spec = import_spec(Reference.parse(ref), container, kubeconfig, context, prometheus, url)
    except KubeImportError as e:
        raise fail(str(e)) from None
    text = ("# written by `advisor deployment import` from the live object; its engine args are read from the "
            "cluster at every experiment\n" + yaml.safe_dump(spec, sort_keys=False))
    if output is None:
        print(text, end="")
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}") from None
    err.print(f"wrote {output}", markup=False, highlight=False)
