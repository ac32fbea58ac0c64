"""What every launcher shares: the `Launcher` protocol an experiment drives its two arms through,
the error a launcher raises, and how a recorded engine process is stopped. The launchers are one
module each (local.py: engine processes on this host; endpoints.py: arms that already serve); what
the arms may differ in is checked in arm_check.py. A `kubernetes` launcher (clone a Deployment with
one argument changed) is one more module with the same protocol; kube_clone.py already builds its
two arms' manifests from the target's workload."""

from __future__ import annotations

from typing import Protocol

from advisor import children
from advisor.errors import AdvisorError
from advisor.experiments.arms.processes import ProcessRecord, Resident


class LaunchError(AdvisorError, RuntimeError):
    pass


class Launcher(Protocol):
    starts: int  # engine processes started so far: a change across bring_up means a cold arm

    def url(self, arm: str) -> str: ...
    def urls(self, arm: str) -> list[str]: ...  # the arm's replicas, url(arm) first
    def bring_up(self, arm: str) -> str: ...
    def check(self, arm: str) -> str | None: ...
    def take_down(self, arm: str) -> None: ...
    def restore(self) -> str | None: ...
    def preflight(self) -> None: ...
    def found_state(self) -> dict: ...
    notes: list[str]  # what the launcher could not confirm about the arms, for the report

    def resident_bytes(self, arm: str, files: tuple[str, ...] = ()) -> Resident: ...


def stop_recorded(record: ProcessRecord, grace: float = 20.0, *, owned: bool = False) -> str:
    """Stop a recorded process after checking that the live process at its pid is still the
    recorded one (same create time and command line). Its process group is signalled with it only
    where the advisor made that group (it started the process as a session's leader and the process
    still leads it) or, with `owned`, where the deployment says the advisor owns the process found
    serving and that process leads its group: an engine's workers share its group. Returns
    "stopped", "exited" (it was already gone), or why it was left alone."""
    proc, why = record.check()
    if proc is None:
        return "exited" if why == "it has exited" else why
    group = (children.leads_group(record.pid, session=True) if record.session
             else owned and children.leads_group(record.pid))
    try:
        stopped = children.stop(proc, grace, group=group, kill_wait=10)
    except PermissionError:
        raise LaunchError(f"not permitted to stop pid {proc.pid} (another user's process)") from None
    if not stopped:
        raise LaunchError(f"process {proc.pid} did not stop")
    return "stopped"
