"""The schedule `advisor serve` runs: a diagnosis of each deployment every `diagnose_every`, a
capacity search every `capacity.every` (in a thread of its own: it takes minutes, and the diagnoses
keep their times meanwhile), and the weekly report at its cron time (written to out_dir, posted to
the webhook).

Each run is one slot of one job (the diagnosis interval it falls in, the cron time it is for),
claimed in the store's job_runs table before it runs: of two advisors on one database only the
first claims a slot, so no job runs twice. A run that fails (Prometheus down) is recorded as such,
and the next slot runs as usual.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import httpx

from advisor.errors import AdvisorError
from advisor.fleet.config import FleetConfig
from advisor.fleet.cron import parse_cron
from advisor.units import parse_duration
from probes.http import origin
from advisor.app.alerts_out import AlertsOut, alerts_out_for
from advisor.app.capacity import capacity_watched
from advisor.app.diagnose import diagnose_watched

log = logging.getLogger("advisor.schedule")
TICK_S = 5.0
WEBHOOK_CHARS = 3500  # Slack shows a message's first ~4000 characters


@dataclass(frozen=True)
class Outcome:
    job: str
    slot: str
    ok: bool
    detail: str


def _slot_of(now: datetime, every_s: float) -> datetime:
    start = int(now.timestamp() // every_s) * every_s
    return datetime.fromtimestamp(start, tz=timezone.utc)


def last_fire(cron_text: str, now: datetime) -> datetime | None:
    """The latest cron time at or before `now`, within the last 8 days."""
    cron = parse_cron(cron_text)
    t, last = now - timedelta(days=8), None
    while True:
        t = cron.next_after(t)
        if t > now:
            return last
        last = t


class Scheduler:
    def __init__(self, config: FleetConfig, store_url: str, owner: str | None = None, tick_s: float = TICK_S,
                 alerts_out: AlertsOut | None = None):
        self.config = config
        self.alerts_out = alerts_out if alerts_out is not None else alerts_out_for(config)
        self.store_url = store_url
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.tick_s = tick_s
        self.started = datetime.now(timezone.utc)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._store = None
        # A capacity search running, by job: its thread and its job_runs row.
        self._long: dict[str, tuple[threading.Thread, int]] = {}

    @property
    def store(self):
        """Opened (and migrated) once, on first use, not at every tick."""
        if self._store is None:
            from advisor.store import open_store

            self._store = open_store(self.store_url)
        return self._store

    def start(self) -> None:
        self.started = datetime.now(timezone.utc)
        self._thread = threading.Thread(target=self._loop, name="advisor-schedule", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        for job, (thread, run_id) in self._long.items():
            if thread.is_alive():  # a search of up to its max_duration is not waited for: said, not lost
                self.store.finish_job(run_id, False, "interrupted: advisor serve stopped during the search")
                log.warning("%s: interrupted by the server's stop", job)
        if self._store is not None:
            self._store.close()
            self._store = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_due(datetime.now(timezone.utc))
            except Exception:  # noqa: BLE001  (a bug must not stop the schedule; it is logged)
                log.exception("schedule tick failed")
            self._stop.wait(self.tick_s)

    def run_due(self, now: datetime) -> list[Outcome]:
        """Runs every job whose slot has come and that no advisor has claimed; returns what ran."""
        done = []
        for w in self.config.deployments:
            if w.diagnose_every:
                slot = _slot_of(now, parse_duration(w.diagnose_every)).isoformat()
                done += self._run(f"diagnose:{w.name}", slot, lambda w=w: self._diagnose(w))
            if w.capacity is not None:
                job = f"capacity:{w.name}"
                slot = _slot_of(now, parse_duration(w.capacity.every)).isoformat()
                done += self._run(job, slot, lambda w=w: self._capacity(w), background=True)
        weekly = self.config.weekly_report
        if weekly is not None:
            fire = last_fire(weekly.cron, now)
            # Only times since this server started: a restart does not replay last Monday.
            if fire is not None and fire >= self.started - timedelta(seconds=self.tick_s):
                done += self._run("weekly-report", fire.isoformat(), lambda: self._weekly(fire))
        return done

    def _run(self, job: str, slot: str, work, background: bool = False) -> list[Outcome]:
        """Claims the slot and runs `work`; a background job (a capacity search) in a thread of its
        own, its outcome recorded when it ends (a slot that comes while it runs waits for it)."""
        running = self._long.get(job)
        if running is not None and running[0].is_alive():
            return []
        store = self.store
        run_id = store.claim_job(job, slot, self.owner)
        if run_id is None:
            return []
        if background:
            thread = threading.Thread(target=self._finish, args=(run_id, job, slot, work), name=job, daemon=True)
            self._long[job] = (thread, run_id)
            thread.start()
            return [Outcome(job, slot, True, "started")]
        return [self._finish(run_id, job, slot, work)]

    def wait_background(self, timeout: float | None = None) -> None:
        """Until every background job started so far has ended (tests, and a clean shutdown)."""
        for thread, _ in list(self._long.values()):
            thread.join(timeout)

    def _finish(self, run_id: int, job: str, slot: str, work) -> Outcome:
        store = self.store
        try:
            detail, ok = work(), True
        except AdvisorError as e:
            detail, ok = str(e).splitlines()[0] if str(e) else type(e).__name__, False
        except Exception as e:  # noqa: BLE001
            log.exception("%s failed", job)
            detail, ok = f"internal error: {type(e).__name__}: {e}", False
        store.finish_job(run_id, ok, detail)
        (log.info if ok else log.warning)("%s %s: %s", job, slot, detail)
        return Outcome(job, slot, ok, detail)

    def _diagnose(self, w) -> str:
        saved = diagnose_watched(w, self.store, self.alerts_out)
        return f"diagnosis {saved.saved_id}: " + saved.diagnosis.summary

    def _capacity(self, w) -> str:
        # The search holds the target's experiment lock: an experiment running there ends it in one line.
        saved = capacity_watched(w, self.store, say=lambda m: log.info("capacity:%s: %s", w.name, m))
        return f"capacity run {saved.id}: {saved.result.summary}"

    def _weekly(self, fire: datetime) -> str:
        from advisor.app.weekly import render, weekly_view
        from advisor.reports.documents import write

        weekly = self.config.weekly_report
        period = parse_duration(weekly.since)
        view = weekly_view(self.config, self.store, None, period, end=fire)  # read once, rendered twice
        page, text = render(view, "html"), render(view, "markdown")
        said = []
        if weekly.out_dir is not None:
            stem = f"weekly-{fire:%Y-%m-%d-%H%M}"
            write(weekly.out_dir / f"{stem}.html", page)
            write(weekly.out_dir / f"{stem}.md", text)
            said.append(f"written to {weekly.out_dir / stem}.html")
        if weekly.webhook:
            post_webhook(weekly.webhook, text)
            said.append("posted to the webhook")
        return "weekly report " + (", ".join(said) or "made (no out_dir or webhook configured)")


def post_webhook(url: str, markdown: str) -> None:
    """Slack-compatible: {"text": ...}. Anything but a 2xx is a failure of the job."""
    where = origin(url)  # a Slack webhook's path is its secret
    text = markdown if len(markdown) <= WEBHOOK_CHARS else markdown[:WEBHOOK_CHARS] + "\n... (the whole report is in out_dir)"
    try:
        r = httpx.post(url, json={"text": text}, timeout=10.0)
    except httpx.HTTPError as e:
        raise AdvisorError(f"webhook at {where}: {type(e).__name__}") from None
    if r.status_code // 100 != 2:
        raise AdvisorError(f"webhook at {where} answered {r.status_code}")
