"""Whether an experiment can still reach a verdict, and if not, why, in words an SRE can act on.

A block is judged only when the load generator held its plan (runner.py), and an arm is judged only
with at least `needed(k)` valid blocks of the k it ran: MIN_VALID_BLOCKS, and at least half, since
the blocks where the generator kept up are otherwise a selection rather than a sample of the arm.
So a run whose arm keeps losing blocks (the load generator starved on a busy host, a baseline
loaded by its own users) cannot end decisive, and running it to its maximum only costs requests.

At every look, for each arm: with v valid blocks of the n it ran and `left` more reachable under
the plan and the guardrails, the verdict is out of reach when even `left` valid blocks would not
make `needed` (certain), or when the chance of making it is below OUT_OF_REACH, predicted from the
arm's own record (a beta-binomial with a uniform prior on its blocks' validity). The rule reads
only validity, never the effect, so it cannot turn a run decisive: no false verdict is added, and a
verdict that a run would have reached is lost only where an arm's validity recovers against its
own record (benchmarks/stats_calibration.py measures both, with the requests it saves).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from advisor.experiments import stats
from advisor.experiments.result import BlockRecord

MIN_VALID_BLOCKS = stats.MIN_BLOCKS  # per arm, with a valid load generator, to judge at all
# A predicted chance of enough valid blocks below this stops the run, once the arm has a record of
# MIN_RECORD blocks (three invalid blocks in a row is a busy minute as often as a busy host). Chosen
# by benchmarks/stats_calibration.py --validity: at 5 % after 4 blocks a run whose validity recovered
# after three bad blocks lost 3 points of power; at these values no scenario loses any.
OUT_OF_REACH = 0.01
MIN_RECORD = 5
# Host CPU share above which the host counts as busy, and the generator's own share of one core
# above which it counts as saturated by its own work (a busy host starves it below that).
HOST_BUSY = 0.90
GENERATOR_SATURATED = 0.85
# Share of a block the generator waited for a CPU above which it was starved, whatever the host's
# average says (one core taken by a busy process is half of a 2-core host).
GENERATOR_STARVED = 0.10
ARMS = ("baseline", "candidate")


def needed(blocks: int) -> int:
    """Valid blocks an arm needs after `blocks` ran to be judged."""
    return max(MIN_VALID_BLOCKS, -(-blocks // 2))


def _arm(blocks: Sequence[BlockRecord], arm: str) -> tuple[list[BlockRecord], list[BlockRecord]]:
    ran = [b for b in blocks if b.arm == arm]
    return ran, [b for b in ran if not b.generator_valid]


def cause(blocks: Sequence[BlockRecord], arm: str) -> str:
    """Why the arm's blocks were invalid, from what was measured while they ran."""
    ran, bad = _arm(blocks, arm)
    whys = "; ".join(sorted({b.why_invalid for b in bad if b.why_invalid})) or "it fell behind"
    parts = [f"the load generator fell behind its schedule on the {arm} arm ({whys})"]
    host = [b.host_cpu_busy for b in bad if b.host_cpu_busy is not None]
    own = [b.generator_cpu for b in bad if b.generator_cpu is not None]
    waited = [b.generator_waited for b in bad if b.generator_waited is not None]
    h, g, w = (max(x) if x else None for x in (host, own, waited))
    busy = f"this host's CPUs were {h:.0%} busy" if h is not None else "this host's CPUs"
    if g is not None and g >= GENERATOR_SATURATED:
        parts.append(f"its own process used {g:.0%} of a core: the schedule is more than one process can send")
    elif w is not None and w >= GENERATOR_STARVED:
        parts.append(f"it waited for a CPU {w:.0%} of the time ({busy}): other processes (the engines included) "
                     "starved it")
    elif h is not None and g is not None and h >= HOST_BUSY:
        parts.append(f"{busy} while it used {g:.0%} of a core: other processes (the engines included) starved it")
    outside = sum(b.server.outside_requests or 0 for b in ran if b.server is not None)
    if outside:
        parts.append(f"the {arm}'s engine served {outside} requests beyond the advisor's: outside traffic on that arm")
    restarted = sum(1 for b in ran[1:] if b.restart_s is not None)
    if restarted:
        parts.append(f"the {arm} restarted before {restarted} of its blocks")
    return ", and ".join(parts)


def remedy(blocks: Sequence[BlockRecord], arm: str) -> str:
    ran, bad = _arm(blocks, arm)
    own = [b.generator_cpu for b in bad if b.generator_cpu is not None]
    if own and max(own) >= GENERATOR_SATURATED:
        return "lower the rate or the concurrency (--concurrency), or send from more processes (load --workers)"
    if any(b.server is not None and b.server.outside_requests for b in ran):
        return ("measure a fresh baseline replica instead of the busy process (--baseline fresh, local.baseline_port), "
                "or run when its users are away")
    return ("run the advisor where its CPU is not shared with the engines or other load (another host), or when "
            "this host is quieter")


def shortfall(blocks: Sequence[BlockRecord]) -> str | None:
    """Why the blocks so far cannot be judged and what would fix it, one clause per arm short of
    valid blocks; None when both arms have enough."""
    out = []
    for arm in ARMS:
        ran, bad = _arm(blocks, arm)
        need = needed(len(ran))
        if ran and len(ran) - len(bad) < need:
            why = f": {cause(blocks, arm)}; to fix: {remedy(blocks, arm)}" if bad else ""
            out.append(f"{len(ran) - len(bad)} valid {arm} blocks of {len(ran)} ({need} needed){why}")
    return "; ".join(out) or None


def out_of_reach(blocks: Sequence[BlockRecord], reachable: int) -> str | None:
    """"cannot be judged: ..." with the cause and the remedy when no verdict can be reached within
    `reachable` blocks per arm (the plan's maximum, or fewer where a guardrail ends it first); None
    while one still can."""
    for arm in ARMS:
        ran, bad = _arm(blocks, arm)
        n, v = len(ran), len(ran) - len(bad)
        left, short = max(0, reachable - n), needed(max(reachable, n)) - v
        if short <= 0 or not bad:  # a plan too short for any verdict is the guardrails' to end, not this rule's
            continue
        if left < short:
            chance = f"at most {left} more can run"
        else:
            p = enough_chance(left, short, v, n - v) if n >= MIN_RECORD else 1.0
            if p >= OUT_OF_REACH:
                continue
            chance = f"{left} more can run, and from its record the chance that {short} of them are valid is {p:.1%}"
        return (f"cannot be judged: {v} valid {arm} blocks of {n}, {needed(max(reachable, n))} needed by the last "
                f"block ({reachable} per arm); {chance}. Cause: {cause(blocks, arm)}. "
                f"Remedy: {remedy(blocks, arm)}")
    return None


def enough_chance(left: int, short: int, valid: int, invalid: int) -> float:
    """P(at least `short` of `left` more blocks are valid), the arm's validity uniform a priori and
    updated on its record (beta-binomial with Beta(1 + valid, 1 + invalid))."""
    a, b = 1 + valid, 1 + invalid

    def log_pmf(x: int) -> float:
        return (math.lgamma(left + 1) - math.lgamma(x + 1) - math.lgamma(left - x + 1)
                + _log_beta(x + a, left - x + b) - _log_beta(a, b))

    return min(1.0, sum(math.exp(log_pmf(x)) for x in range(short, left + 1)))


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def reachable(k: int, max_blocks: int, sent: int, block_requests: int, max_requests: int,
              elapsed_s: float, max_duration_s: float) -> int:
    """Blocks per arm the run can still reach after k per arm: the plan's maximum, fewer where the
    request or duration guardrail would stop it first (the time a pair took so far, projected)."""
    pairs = max_blocks - k
    if block_requests > 0:
        pairs = min(pairs, max(0, max_requests - sent) // (2 * block_requests))
    if k > 0 and elapsed_s > 0:
        pairs = min(pairs, int(max(0.0, max_duration_s - elapsed_s) // (elapsed_s / k)))
    return k + max(0, pairs)
