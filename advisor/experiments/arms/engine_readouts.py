"""Server-side readouts of an experiment: each arm's own engine, read around each block.

The client's readouts say *whether* the candidate is faster; the engine's say *why*, in the map's
terms: a wider effective batch, a shorter queue, more prefix-cache hits, drafts accepted or not.
They also expose what the client cannot see: requests that the advisor did not send (outside
traffic on an arm, which the two arms do not share and which makes them unlike).

A watch that cannot read /metrics (an engine without it, a proxy in front) never stops the
experiment: the block keeps its client readouts and a note says why it has no server ones.
"""

from __future__ import annotations

import statistics
import time

import httpx

from advisor import net
from advisor.experiments.arms.processes import serving_pids
from advisor.experiments.result import BlockRecord, ServerReadout, ServerRow
from probes.gpu import BLOCK_SIGNALS as GPU_SIGNALS
from probes.gpu import GpuSampler
from probes.snapshot import NO_TRAFFIC
from probes.watch import Watch

# Read for every block, whatever the knob: the map's "watch" columns that explain most verdicts.
ALWAYS = ("requests_running_avg", "requests_waiting_avg", "requests_waiting_max", "kv_cache_usage_max",
          "preemptions_per_s", "prefix_cache_hit_rate", "queue_time_p95", "prefill_time_p95", "decode_time_p95",
          "generation_tokens_per_s", "spec_acceptance_rate")
# Often enough that a block of a few seconds has several scrapes while its load runs (gauges are
# sampled, not integrated); a vLLM /metrics page costs its API server a few milliseconds each.
SCRAPE_EVERY_S = 0.5
# Counted beyond what was sent before a block is said to have had outside traffic: vLLM counts a
# request the client gave up on, and one block's last request can land in the next scrape.
OUTSIDE_SLACK = 2


class BlockWatch:
    """Started before a block's load, stopped after it; `readout()` never raises."""

    def __init__(self, url: str, engine: str, model: str, watch: tuple[str, ...] = (),
                 every_s: float = SCRAPE_EVERY_S, transport: httpx.BaseTransport | None = None,
                 describe: bool = False, nvml=None):
        """describe: also read what the arm's engine says it is (`arm_info`), for the manifest.
        nvml: a stand-in for the NVML module (tests)."""
        self.signals = tuple(dict.fromkeys((*ALWAYS, *watch)))
        self._watch: Watch | None = None
        self._gpu: GpuSampler | None = None
        self._note: str | None = None
        self.arm_info: dict | None = None
        try:
            self._watch = Watch(url, engine=engine, model=model, every_s=every_s,
                                http=net.config("engine", url=url), transport=transport)
            self._watch.start(describe=describe)
        except Exception as e:  # noqa: BLE001 - the block runs without server readouts, and says why
            self._watch, self._note = None, f"no server readouts: {e}"
        else:
            if self._watch.info is not None:
                self.arm_info = self._watch.info.model_dump(exclude={"problems"})
        if set(self.signals) & set(GPU_SIGNALS):
            # GPU signals read during the block, of the devices the arm's own processes hold: a
            # reading after it would show an idle GPU, and NVML cannot tell one arm's devices from
            # the other's otherwise. An arm on another host has its GPUs read by that host.
            pids = serving_pids(url)
            if pids:
                self._gpu = GpuSampler(pids, every_s=every_s, nvml=nvml).start()

    def close(self) -> None:
        """The block failed: stop watching without reading (idempotent)."""
        if self._gpu is not None:
            self._gpu.stop()
            self._gpu = None
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def readout(self, sent: int) -> ServerReadout:
        gpu, self._gpu = (self._gpu.stop() if self._gpu is not None else {}), None
        if self._watch is None:
            return ServerReadout(signals={k: v for k, v in gpu.items() if k in self.signals}, note=self._note)
        watch, self._watch = self._watch, None
        try:
            found = watch.stop()
        except Exception as e:  # noqa: BLE001 - the block keeps its client readouts
            return ServerReadout(note=f"no server readouts: {e}")
        window = next((s.window_s for s in found.values() if s.window_s), None)
        values = {name: gpu[name] if name in gpu else found[name].value if name in found else None
                  for name in self.signals}
        rate = found.get("request_rate")
        if rate is not None and rate.present and window:
            counted = round(rate.value * window)
        else:  # nothing finished in the window is a count of zero; a metric not exported is unknown
            counted = 0 if rate is not None and rate.missing == NO_TRAFFIC else None
        outside = max(0, counted - sent) if counted is not None else None
        problems = watch.problems
        note = f"{len(problems)} scrape(s) failed during the block: {problems[-1]}" if problems else None
        return ServerReadout(signals=values, window_s=window, requests_counted=counted,
                             outside_requests=outside, note=note)


# How one arm's replicas' readouts make the arm's: what adds up (requests in the batch or the
# queue, rates), what the worst replica says (peaks, tails), and the rest (ratios) averaged.
_SUMMED_SUFFIXES = ("_per_s",)
_SUMMED = {"requests_running_avg", "requests_waiting_avg", "requests_waiting_max"}
_WORST_SUFFIXES = ("_max", "_p95", "_p99")


def combine(name: str, values: list[float | None]) -> float | None:
    """One signal of an arm from its replicas' values; unknown where any replica's is."""
    if not values or any(v is None for v in values):
        return None
    if name in _SUMMED or name.endswith(_SUMMED_SUFFIXES):
        return float(sum(values))
    if name.endswith(_WORST_SUFFIXES):
        return float(max(values))
    return float(statistics.fmean(values))


class ReplicasWatch:
    """A BlockWatch per replica of an arm (the replicas knob), read as one arm: `combine` per signal,
    requests counted over all of them against those the advisor sent to the arm."""

    def __init__(self, urls: list[str], engine: str, model: str, watch: tuple[str, ...] = (),
                 every_s: float = SCRAPE_EVERY_S, describe: bool = False):
        self.watches = [BlockWatch(u, engine, model, watch, every_s, describe=describe and i == 0)
                        for i, u in enumerate(urls)]
        self.arm_info = self.watches[0].arm_info

    def close(self) -> None:
        for w in self.watches:
            w.close()

    def readout(self, sent: int) -> ServerReadout:
        parts = [w.readout(sent) for w in self.watches]
        if len(parts) == 1:
            return parts[0]
        names = dict.fromkeys(n for p in parts for n in p.signals)
        counts = [p.requests_counted for p in parts]
        counted = None if any(c is None for c in counts) else sum(counts)
        notes = [f"replica {i + 1}: {p.note}" for i, p in enumerate(parts) if p.note]
        return ServerReadout(signals={n: combine(n, [p.signals.get(n) for p in parts]) for n in names},
                             window_s=max((p.window_s for p in parts if p.window_s), default=None),
                             requests_counted=counted,
                             outside_requests=max(0, counted - sent) if counted is not None else None,
                             note="; ".join(notes) or None)


def per_arm(blocks: list[BlockRecord], watch: tuple[str, ...] = ()) -> list[ServerRow]:
    """Each signal's median over an arm's valid blocks, watched signals first; signals that no block
    of either arm has a value for are left out."""
    names: dict[str, None] = dict.fromkeys(watch)
    for b in blocks:
        if b.server:
            names.update(dict.fromkeys(b.server.signals))
    rows = []
    for name in names:
        vals = {arm: [b.server.signals[name] for b in blocks
                      if b.arm == arm and b.generator_valid and b.server and b.server.signals.get(name) is not None]
                for arm in ("baseline", "candidate")}
        if not vals["baseline"] and not vals["candidate"]:
            continue
        rows.append(ServerRow(signal=name, watched=name in watch,
                              baseline=statistics.median(vals["baseline"]) if vals["baseline"] else None,
                              candidate=statistics.median(vals["candidate"]) if vals["candidate"] else None))
    return rows


def notes(blocks: list[BlockRecord], rows: list[ServerRow], verdict: str) -> list[str]:
    """Outside traffic per arm, arms without readouts, and (for a verdict that is not an
    improvement) what the watched signals did, in the words a failure is explained in."""
    out = []
    for arm in ("baseline", "candidate"):
        mine = [b for b in blocks if b.arm == arm]
        extra = [b for b in mine if b.server and (b.server.outside_requests or 0) > OUTSIDE_SLACK]
        if extra:
            n = sum(b.server.outside_requests for b in extra)
            which = ", ".join(str(b.block + 1) for b in extra)
            out.append(f"outside traffic: the {arm}'s engine finished {n} requests the advisor did not send during "
                       f"its block{'s' if len(extra) > 1 else ''} {which}; those blocks measured a heavier load "
                       "than the other arm's")
        blind = [b for b in mine if not b.server or not b.server.signals]
        if blind and mine:
            why = next((b.server.note for b in blind if b.server and b.server.note), "not read")
            out.append(f"{len(blind)} of {len(mine)} {arm} blocks have no server readouts ({why})")
    # A signal only one arm has is news too: a drafter's acceptance exists on the candidate alone.
    watched = [r for r in rows if r.watched and (r.baseline is not None or r.candidate is not None)]
    if watched and verdict != "improved":
        out.append("watched signals, baseline -> candidate: "
                   + "; ".join(f"{r.signal} {fmt(r.baseline)} -> {fmt(r.candidate)}" for r in watched))
    return out


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) >= 0.001 else f"{v:.2e}"


# How long the baseline found serving is watched before the first block for traffic of its own:
# long enough for a few scrapes and for a user's request to finish, short beside a block.
LISTEN_S = 3.0


def outside_traffic(url: str, engine: str, model: str, seconds: float | None = None,
                    transport: httpx.BaseTransport | None = None) -> str | None:
    """What the engine at url served in `seconds` while the advisor sent it nothing ("12 requests
    finished, 3.5 running on average"), or None when it was idle or cannot be read (then nothing
    is known, and the caller decides as if idle). seconds: default LISTEN_S."""
    seconds = LISTEN_S if seconds is None else seconds
    watch = BlockWatch(url, engine, model, transport=transport)
    time.sleep(seconds)
    r = watch.readout(0)
    finished = r.requests_counted or 0
    running = r.signals.get("requests_running_avg") or 0.0
    waiting = r.signals.get("requests_waiting_avg") or 0.0
    if finished <= OUTSIDE_SLACK and running < 0.1 and waiting < 0.1:
        return None
    parts = [f"{finished} requests finished" if finished else None,
             f"{running:.1f} running" if running >= 0.1 else None,
             f"{waiting:.1f} waiting on average" if waiting >= 0.1 else None]
    return f"{', '.join(p for p in parts if p)} in {r.window_s or seconds:.0f} s before the first block"
