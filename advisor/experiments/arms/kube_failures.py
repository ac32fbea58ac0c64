"""Why a Kubernetes arm's pod will not serve, in one line quoting the pod's own status or event
(DESIGN 12): unschedulable, an image that cannot be pulled, a crash loop, OOMKilled, a container
that cannot be configured. Pure functions over the pod and its events as the API returns them;
None while the pod is still on its way (being scheduled, pulling, starting) or serving.

Untrusted text: a pod's messages come from the cluster and from the image (a crash's reason); they
are cut to one line of bounded length here, and escaped where they are shown, like every target's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

_MAX = 300
# Waiting reasons that do not pass by themselves: the experiment ends on them.
_STUCK = {"ImagePullBackOff": "cannot pull its image", "ErrImagePull": "cannot pull its image",
          "InvalidImageName": "has an invalid image name", "CreateContainerConfigError": "cannot be configured",
          "CreateContainerError": "cannot be created", "RunContainerError": "cannot be run"}
# A container that has restarted this often is a crash loop even before the kubelet says so.
CRASH_RESTARTS = 3


def _line(text: object) -> str:
    one = " ".join(str(text or "").split())
    return one if len(one) <= _MAX else one[: _MAX - 3] + "..."


def _last_event(events: Sequence[Mapping], reason: str) -> Mapping | None:
    found = [e for e in events if e.get("reason") == reason]
    return max(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or "")) if found else None


def failure(pod: Mapping, events: Sequence[Mapping] = (), container: str | None = None) -> str | None:
    """Why the pod will not become ready, quoting its status or its newest matching event; None
    while it may still. container: the engine container (default: every container is read)."""
    name = (pod.get("metadata") or {}).get("name", "the pod")
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        if container is not None and c.get("name") != container:
            continue
        waiting = (c.get("state") or {}).get("waiting") or {}
        last = (c.get("lastState") or {}).get("terminated") or {}
        image = c.get("image") or "its image"
        reason = waiting.get("reason")
        if last.get("reason") == "OOMKilled":
            return (f"pod {name}: container {c.get('name')} was OOMKilled (exit code {last.get('exitCode')}, "
                    f"{c.get('restartCount', 0)} restarts): its memory limit is too small for the engine")
        if reason in _STUCK:
            what = _STUCK[reason].replace("its image", image) if "image" in _STUCK[reason] else _STUCK[reason]
            return f"pod {name}: container {c.get('name')} {what} ({reason}): {_line(waiting.get('message'))}"
        if reason == "CrashLoopBackOff" or ((c.get("restartCount") or 0) >= CRASH_RESTARTS and last):
            return (f"pod {name}: container {c.get('name')} is crash-looping ({c.get('restartCount', 0)} restarts; "
                    f"last exit code {last.get('exitCode')}, {last.get('reason') or 'no reason'}"
                    + (f": {_line(last.get('message'))}" if last.get("message") else "") + ")")
    if status.get("phase") == "Failed":
        return f"pod {name} failed ({status.get('reason') or 'no reason'}): {_line(status.get('message'))}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            event = _last_event(events, "FailedScheduling")
            said = (event or {}).get("message") or cond.get("message")
            return f"pod {name} cannot be scheduled (FailedScheduling): {_line(said)}"
    return None
