"""Alertmanager in: a webhook notification becomes at most one diagnosis per deployment per interval.

Alertmanager repeats a group's notification (repeat_interval, every resend of a firing group, one
per receiver of a route), and a flapping rule can notify often: the intake decides, under one lock,
which deployments get a diagnosis now, and counts the rest. An alert whose labels name no
deployment of advisor.yaml is answered all the same (a 2xx: Alertmanager retries anything else,
for ever) and logged with the reason. The diagnosis itself is the diagnose service's, run by the
caller (advisor/web/alerts.py) beside the request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from advisor.fleet.config import FleetConfig

log = logging.getLogger("advisor.alertmanager")
OWN_SOURCE = "llm-advisor"  # the `source` label of the findings advisor.app.alerts_out posts


class AmAlert(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: str = Field(pattern="^(firing|resolved)$")
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: str | None = None  # noqa: N815 - Alertmanager's names
    generatorURL: str | None = None  # noqa: N815
    fingerprint: str | None = None


class AmNotification(BaseModel):
    """Alertmanager's webhook body (version 4): the fields the intake reads."""
    model_config = ConfigDict(extra="allow")
    version: str
    groupKey: str = Field(max_length=4096)  # noqa: N815
    status: str = Field(pattern="^(firing|resolved)$")
    receiver: str = ""
    externalURL: str = ""  # noqa: N815
    alerts: list[AmAlert] = Field(max_length=10_000)


@dataclass
class Intake:
    """started: deployments diagnosed now; dropped: (deployment, why) within the interval or
    already running; unknown: (label value or None, why) of alerts that name no deployment."""
    started: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    unknown: list[tuple[str | None, str]] = field(default_factory=list)
    resolved: int = 0
    own: int = 0  # the advisor's own findings, routed back: never a reason to diagnose again


class AlertIntake:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # deployment -> when its last alert-started diagnosis began
        self.dropped_total = 0

    def receive(self, note: AmNotification, config: FleetConfig) -> Intake:
        out = Intake()
        label = config.alertmanager.deployment_label
        interval = config.alertmanager.min_interval_s
        wanted: list[str] = []
        for a in note.alerts:
            if a.status != "firing":
                out.resolved += 1
                continue
            if a.labels.get("source") == OWN_SOURCE:
                out.own += 1
                continue
            name = a.labels.get(label)
            if name is None:
                out.unknown.append((None, f"the alert {a.labels.get('alertname', '?')!r} has no {label!r} label"))
            elif config.get(name) is None:
                out.unknown.append((name, f"advisor.yaml names no deployment {name!r}"))
            elif name not in wanted:
                wanted.append(name)
        now = self.clock()
        with self._lock:
            for name in wanted:
                last = self._last.get(name)
                if last is not None and now - last < interval:
                    out.dropped.append((name, f"a diagnosis of {name} was started by an alert {now - last:.0f} s ago "
                                              f"(at most one per {interval:.0f} s)"))
                    continue
                self._last[name] = now
                out.started.append(name)
            self.dropped_total += len(out.dropped)
        for name, why in out.dropped:
            log.info("alertmanager: dropped (group %s): %s; %d dropped so far", note.groupKey[:200], why,
                     self.dropped_total)
        for name, why in out.unknown:
            log.warning("alertmanager: not diagnosed (group %s): %s", note.groupKey[:200], why)
        return out
