"""Report documents built from the store: what `advisor report`, `advisor diagnose --out` and the
dashboard's downloads write. HTML or markdown by the file's extension."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from collections.abc import Sequence

from pydantic import ValidationError

from advisor.diagnosis.model import Diagnosis
from advisor.errors import AdvisorError
from advisor.capacity.result import CapacityResult
from advisor.experiments.result import ExperimentResult
from advisor.reports import html, views
from advisor.store.errors import StoreError, one_line
from datetime import datetime, timezone

FORMATS = {".html": "html", ".htm": "html", ".md": "markdown"}


class ReportError(AdvisorError):
    pass


def format_of(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ReportError(f"cannot tell the report format of {path}: use a .html or .md file name")
    return fmt


def diagnosis_document(d: Diagnosis, fmt: str, *, ident: int | None = None, deployment: str | None = None,
                       results: Sequence[ExperimentResult] = ()) -> str:
    """A diagnosis as it was just made; `results`: the experiments its checks ran."""
    if fmt == "markdown":
        from advisor.reports import markdown

        return markdown.diagnosis(d, results, ident=ident, deployment=deployment)
    view = views.diagnosis_view(d, ident=ident, deployment=deployment, experiments=views.experiment_views(results))
    return html.render("diagnosis.html.j2", d=view)


# A running experiment's row is touched after every block; one untouched for this long belongs to a
# process that died without a word (SIGKILL, a lost machine): `advisor recover` restores its target.
STALE_S = 45 * 60


def stored_experiment_view(store, experiment_id: int, charts_on: bool = True) -> views.ExperimentView:
    stored = store.get_experiment(experiment_id)
    s = stored.summary
    result = stored_result(stored)
    status = s.status
    if status == "running" and (datetime.now(timezone.utc) - s.updated_at).total_seconds() > STALE_S:
        status = "stale"
    running = store.list_load_runs(experiment_id=s.id, limit=1000) if result is None else None
    return views.experiment_view(result, key=s.key, deployment=s.deployment, mechanism=s.mechanism,
                                 value=s.value, status=status, design=stored.design,
                                 running_blocks=list(reversed(running or [])), ident=s.id,
                                 diagnosis_id=s.diagnosis_id, created=s.created_at, charts_on=charts_on)


def stored_result(stored) -> ExperimentResult | None:
    """A stored experiment's result, typed: None while it runs or when it ended without one."""
    if stored.result_document is None:
        return None
    try:
        return ExperimentResult.model_validate(stored.result_document)
    except ValidationError as exc:
        raise StoreError(f"experiment {stored.summary.id} does not read as an ExperimentResult: "
                         f"{one_line(exc)} ({exc.error_count()} errors)") from exc


def stored_capacity(run_id: int, doc: dict) -> CapacityResult:
    """A stored capacity answer, typed; a document that does not read as one is one StoreError line."""
    try:
        return CapacityResult.model_validate(doc)
    except ValidationError as exc:
        raise StoreError(f"capacity run {run_id} does not read as a CapacityResult: {one_line(exc)} "
                         f"({exc.error_count()} errors)") from exc


def stored_diagnosis_view(store, diagnosis_id: int, charts_on: bool = True) -> views.DiagnosisView:
    """A saved diagnosis' view, with the stored results (every block) of the experiments run for it."""
    d = store.get_diagnosis(diagnosis_id)
    summary = store.get_diagnosis_summary(diagnosis_id)
    linked = store.list_experiments(diagnosis_id=diagnosis_id)
    experiments = [stored_experiment_view(store, e.id, charts_on=charts_on) for e in reversed(linked)]
    return views.diagnosis_view(d, ident=diagnosis_id, deployment=summary.deployment, experiments=experiments,
                                charts_on=charts_on)


def stored_diagnosis(store, diagnosis_id: int, fmt: str) -> str:
    if fmt == "markdown":
        from advisor.reports import markdown

        return markdown.render("diagnosis.md.j2", v=stored_diagnosis_view(store, diagnosis_id, charts_on=False))
    return html.render("diagnosis.html.j2", d=stored_diagnosis_view(store, diagnosis_id))


def stored_experiment(store, experiment_id: int, fmt: str = "html") -> str:
    if fmt == "markdown":
        from advisor.reports import markdown

        return markdown.experiment(stored_experiment_view(store, experiment_id, charts_on=False))
    return html.render("experiment.html.j2", x=stored_experiment_view(store, experiment_id))


def write(path: Path, text: str) -> Path:
    """Atomically: a reader (a browser, a webhook) never sees half a report."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        raise ReportError(f"cannot write the report to {path}: {e.strerror or e}") from None
    return path
