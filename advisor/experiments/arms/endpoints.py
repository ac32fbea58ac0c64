"""The endpoints launcher: both arms already serve (two URLs someone brought up); nothing is
started, stopped or restored, and before anything is sent the arms are compared (arm_check.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

from advisor.engine_process import healthy
from advisor.experiments.arms import arm_check
from advisor.experiments.arms.engine_state import observe_url
from advisor.experiments.arms.processes import Resident, resident_bytes
from advisor.experiments.arms.protocol import LaunchError
from advisor.experiments.design.deployment import Deployment
from probes.http import redact_url


class EndpointsLauncher:
    """Both arms already serve: nothing to start, stop or restore; only health is checked, and
    before anything is sent, that the arms differ in the named knob only (arm_check.py)."""

    starts = 0

    def __init__(self, dep: Deployment, mechanism: str | None = None, aa: bool = False):
        self.dep, self.spec = dep, dep.endpoints
        self.mechanism, self.aa = mechanism, aa
        self.notes: list[str] = []

    def url(self, arm: str) -> str:
        return (self.spec.baseline if arm == "baseline" else self.spec.candidate).rstrip("/")

    def urls(self, arm: str) -> list[str]:
        return [self.url(arm)]

    def bring_up(self, arm: str) -> str:
        if not healthy(self.url(arm), self.spec.health_path):
            raise LaunchError(f"the {arm} endpoint {redact_url(self.url(arm))} is not healthy")
        return self.url(arm)

    def check(self, arm: str) -> str | None:
        return None if healthy(self.url(arm), self.spec.health_path) else f"{arm} at {redact_url(self.url(arm))} stopped answering {self.spec.health_path}"

    def take_down(self, arm: str) -> None:
        pass

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident:
        """Read only where the arm serves on this host (a loopback URL); elsewhere its memory is the
        engine host's to report."""
        u = urlsplit(self.url(arm))
        if u.hostname not in ("127.0.0.1", "localhost", "::1"):
            return Resident()
        return resident_bytes(u.port or (443 if u.scheme == "https" else 80), files)

    def preflight(self) -> None:
        if self.mechanism is None and not self.aa:
            return
        base, cand = (observe_url(self.url(arm), self.dep.engine, self.dep.model) for arm in ("baseline", "candidate"))
        note = arm_check.check(base, cand, self.mechanism or "aa", aa=self.aa)
        if note:
            self.notes.append(note)

    def found_state(self) -> dict:
        return {"found_serving": healthy(self.url("baseline"), self.spec.health_path)}

    def restore(self) -> str | None:
        if not healthy(self.url("baseline"), self.spec.health_path):
            raise LaunchError(f"baseline {redact_url(self.url('baseline'))} is not healthy after the experiment")
        return None
