"""One arrival process over several processes: `advisor load --workers N`.

One core holds a few hundred requests per second (benchmarks/loadgen_rate.py). Beyond that the
planned requests, drawn once from the workload (one global arrival process), are dealt round-robin
to N worker processes. Each runs advisor.loadgen.runner.run against the same origin on the wall
clock (`start_at`), so the sends interleave in the planned order; the parent merges the records back
into that order, and the generator's validity (lag, achieved rate) is computed over all of them.

Nothing measured is lost when a worker dies: every finished request's record is written to the
parent synchronously, on the worker's own pipe, the moment it ends (about 10 us a record). What a
dead worker had in flight or still planned is reported: requests whose send time had come are
errors ("load worker N died ..."), later ones are not sent, and the run says which worker died
and how.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from advisor.errors import AdvisorError
from advisor.loadgen.record import RequestRecord
from advisor.loadgen.runner import Progress, Run, Target
from advisor.workload.plan import PlannedRequest
from advisor.loadgen.loop import run_load
from advisor.loadgen.runner import run

READY_TIMEOUT_S = 60.0  # a spawned worker imports the advisor first
START_MARGIN_S = 0.2  # between "every worker is ready" and the schedule's origin


class WorkerError(AdvisorError):
    pass


def _worker(conn: Connection, target: Target, requests: list[PlannedRequest], prompts: dict[int, str],
            concurrency: int | None, duration_s: float | None, max_in_flight: int) -> None:
    conn.send(("ready",))
    start_at = conn.recv()

    def stop() -> str | None:
        return conn.recv() if conn.poll() else None

    r = run_load(run(target, requests, prompts, concurrency=concurrency, duration_s=duration_s,
                     should_abort=stop, max_in_flight=max_in_flight, start_at=start_at,
                     on_done=lambda rec: conn.send(("rec", rec))))
    conn.send(("end", r.wall_s, r.aborted, r.notes))
    conn.close()


def _deal(items: list, n: int) -> list[list]:
    return [items[i::n] for i in range(n)]


def run_workers(target: Target, requests: list[PlannedRequest], prompts: dict[int, str], *, workers: int,
                concurrency: int | None = None, duration_s: float | None = None,
                progress: Progress | None = None, should_abort: Callable[[], str | None] | None = None,
                max_in_flight: int = 1024) -> Run:
    """Like runner.run (synchronously), over `workers` processes."""
    if workers < 1:
        raise WorkerError(f"--workers must be at least 1, got {workers}")
    workers = min(workers, len(requests)) or 1
    ctx = mp.get_context("spawn")  # no fork of a parent that may hold threads and an event loop
    slots = [len(s) for s in _deal(list(range(concurrency)), workers)] if concurrency else [None] * workers
    procs, conns = [], []
    for i, mine in enumerate(_deal(requests, workers)):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, name=f"advisor-load-{i + 1}", daemon=True,
                        args=(child, target, mine, {r.index: prompts[r.index] for r in mine},
                              slots[i], duration_s, max(1, max_in_flight // workers)))
        p.start()
        child.close()
        procs.append(p)
        conns.append(parent)
    records: dict[int, RequestRecord] = {}
    ended: dict[int, tuple] = {}  # worker -> (wall_s, aborted, notes)
    died: dict[int, tuple[float, str]] = {}  # worker -> (unix time seen dead, how)
    try:
        _await_ready(procs, conns)
        start_at = time.time() + START_MARGIN_S
        for c in conns:
            c.send(start_at)
        aborted = _collect(procs, conns, records, ended, died, progress, len(requests), should_abort)
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    out: list[RequestRecord] = []  # in the planned order: request k went to worker k % workers
    for k, req in enumerate(requests):
        rec = records.get(req.index)
        if rec is None:
            owner = k % workers
            rec = RequestRecord(req.index, req.bucket, req.prompt_tokens, req.output_tokens, req.at_s,
                                prefix_group=req.prefix_group, priority=req.priority)
            if owner in died and (req.at_s is None or req.at_s <= died[owner][0] - start_at):
                rec.status, rec.error = "error", f"load worker {owner + 1} died ({died[owner][1]})"
        out.append(rec)
    notes = [n for _, (_, _, ns) in sorted(ended.items()) for n in ns or []]
    if died:
        lost = sum(r.error is not None and r.error.startswith("load worker") for r in out)
        why = "; ".join(f"load worker {i + 1} died ({how})" for i, (_, how) in sorted(died.items()))
        aborted = f"{why}: {lost} requests it had in flight or due are errors, its later ones were not sent"
    wall = max((w for w, _, _ in ended.values()), default=time.time() - start_at)
    if died:
        wall = max(wall, time.time() - start_at)
    span = None if concurrency else max((r.at_s for r in requests if r.at_s is not None), default=0.0)
    return Run(records=out, started_at=start_at, wall_s=wall, planned_span_s=span, aborted=aborted, notes=notes)


def _await_ready(procs, conns) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    pending = set(range(len(conns)))
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerError(f"{len(pending)} load worker(s) not ready after {READY_TIMEOUT_S:.0f}s")
        for c in wait([conns[i] for i in pending], timeout=left):
            i = conns.index(c)
            try:
                c.recv()
            except EOFError:
                raise WorkerError(f"load worker {i + 1} exited while starting "
                                  f"(exit code {procs[i].exitcode})") from None
            pending.discard(i)


def _collect(procs, conns, records, ended, died, progress, total, should_abort) -> str | None:
    """Read every worker's records until each has ended or died. Returns why the run was aborted."""
    aborted = None
    open_ = set(range(len(conns)))
    last_check = time.monotonic()
    while open_:
        for c in wait([conns[i] for i in open_], timeout=0.5):
            i = conns.index(c)
            try:
                msg = c.recv()
            except (EOFError, OSError):
                procs[i].join(timeout=2)
                code = procs[i].exitcode
                how = f"exit code {code}" if code is None or code >= 0 else f"killed by signal {-code}"
                died[i] = (time.time(), how)
                open_.discard(i)
                continue
            if msg[0] == "rec":
                records[msg[1].index] = msg[1]
                if progress:
                    progress(len(records), total)
            elif msg[0] == "end":
                ended[i] = msg[1:]
                if msg[2] and aborted is None:
                    aborted = msg[2]
                open_.discard(i)
        if should_abort is not None and aborted is None and time.monotonic() - last_check >= 0.5:
            last_check = time.monotonic()
            why = should_abort()
            if why:
                aborted = why
                for i in open_:
                    try:
                        conns[i].send(why)
                    except OSError:
                        pass
    return aborted
