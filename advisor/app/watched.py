"""The dashboard's experiment actions: a watched deployment and a check become an
`ExperimentRequest` for the experiment service. A preview is designed in process; a start runs in a
worker process the server supervises (advisor/app/jobs.py), so that it keeps every guarantee of an
experiment (journal, lock, the baseline restored on any ending, SIGTERM as an interrupt) and a crash
of the web server cannot leave a candidate serving. The server stops its workers with SIGTERM and
waits for their restores when it shuts down."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from advisor.app.experiment import ExperimentRequest
from advisor.app.jobs import ExperimentJobs, JobError
from advisor.errors import AdvisorError
from advisor.fleet.config import WatchedDeployment
from advisor.app import experiment
from advisor.experiments.design.deployment import load_deployment
from probes.http import BasicAuth, BearerAuth

ActionError = JobError  # an action that could not be done; `status` is the HTTP status answered


@dataclass(frozen=True)
class CheckRef:
    mechanism: str
    direction: str | None
    readout: str | None
    value: str | None = None


def spec_name(watched: WatchedDeployment) -> str:
    """The name experiments are stored under: the deployment spec's own. Pages ask for it on every
    view (a running experiment's page every 5 s): the file is read again only when it changed."""
    path = _spec(watched)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = -1  # load_deployment says what is wrong, in one line
    return _spec_name(path, mtime)


@functools.lru_cache(maxsize=64)
def _spec_name(path: Path, _mtime_ns: int) -> str:
    return load_deployment(path).name


def _spec(watched: WatchedDeployment) -> Path:
    if watched.deployment is None:
        raise ActionError(f"{watched.name} has no deployment spec in advisor.yaml (deployment: FILE): "
                          "experiments need one to launch the candidate")
    return watched.deployment


def request_for(watched: WatchedDeployment, ref: CheckRef, diagnosis_id: int | None) -> ExperimentRequest:
    """The experiment of `ref` on `watched`, within advisor.yaml's experiment limits; its workload
    read from the deployment's own Prometheus."""
    limits = watched.experiments
    return ExperimentRequest(deployment=_spec(watched), mechanism=ref.mechanism, value=ref.value,
                             direction=ref.direction or None, readout=limits.readout or ref.readout,
                             from_prom=watched.prom_url, blocks=limits.blocks, block_requests=limits.block_requests,
                             concurrency=limits.concurrency, max_duration=limits.max_duration, fixed=limits.fixed,
                             diagnosis_id=diagnosis_id)


class ExperimentRuns:
    """The experiments this server started, each in a worker it supervises."""

    def __init__(self, store_url: str, log_dir: Path):
        self.store_url = store_url
        self.jobs = ExperimentJobs(log_dir)

    def _env(self, watched: WatchedDeployment) -> dict[str, str]:
        env = {"ADVISOR_DB_URL": self.store_url}
        auth = getattr(watched, "_auth", None)
        # The worker reads Prometheus with advisor.yaml's credentials, never on a command line.
        if isinstance(auth, BasicAuth):
            env.update(ADVISOR_PROM_USER=auth.user, ADVISOR_PROM_PASSWORD=auth.password)
        elif isinstance(auth, BearerAuth):
            env["ADVISOR_PROM_TOKEN"] = auth.token
        return env

    def preview(self, watched: WatchedDeployment, ref: CheckRef) -> dict:
        """The design the experiment would run: both arms' argv, the flags that differ, guardrails."""

        try:
            return experiment.preview(request_for(watched, ref, None)).model_dump(mode="json")
        except ActionError:
            raise
        except AdvisorError as e:
            raise ActionError(f"cannot plan the experiment: {e}") from None

    def start(self, watched: WatchedDeployment, ref: CheckRef, diagnosis_id: int | None) -> int:
        """Starts the experiment; returns its store id once its row exists (it then runs on).
        One at a time per deployment: its target lock would refuse a second anyway, later."""
        from advisor.store import open_store

        name = spec_name(watched)
        request = request_for(watched, ref, diagnosis_id)
        with open_store(self.store_url) as store:
            return self.jobs.start(request, group=watched.name, env=self._env(watched),
                                   find_row=lambda key: store.find_experiment_by_launch(name, key))

    def stop_all(self) -> None:
        """SIGTERM to every running worker (an interrupt: it restores its baseline), then wait."""
        self.jobs.stop_all()
