"""The trial of the load generator's schedule before any arm starts (advisor/experiments/run/pacing.py):
kept on a free loop, refused with the numbers and the remedy when the loop is starved."""

from __future__ import annotations

import time

from advisor.experiments.run import pacing
from advisor.workload.plan import PlannedRequest


def schedule(rate: float, seconds: float = 4.0, closed: bool = False) -> list[PlannedRequest]:
    return [PlannedRequest(i, None if closed else i / rate, "b", 512, 64, None, None) for i in range(int(rate * seconds))]


def test_a_closed_loop_workload_has_no_schedule_to_try():
    assert pacing.check(schedule(10, closed=True), "completions", "m") is None


def test_a_starved_loop_is_refused_with_its_lag_and_the_remedy(monkeypatch):
    """Each send's own work blocks the loop for 80 ms (as a CPU taken by others would): a schedule
    of 20/s cannot be kept."""
    real = pacing.client.body

    def slow_body(*a, **k):
        time.sleep(0.08)
        return real(*a, **k)

    monkeypatch.setattr(pacing.client, "body", slow_body)
    p = pacing.check(schedule(20, seconds=1.0), "completions", "m")
    assert p is not None and not p.kept and p.lag_p99_s > 0.05
    text = p.refusal()
    assert "cannot keep this schedule on this host now" in text and "ms late at p99" in text
    assert "lower the workload's rate" in text


def test_only_the_first_seconds_are_tried():
    p = pacing.trial(schedule(10, seconds=30))
    assert p is not None and p.sends == int(10 * pacing.TRIAL_S) + 1
