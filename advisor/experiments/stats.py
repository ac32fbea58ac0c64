"""The statistics of an A/B experiment: the candidate/baseline ratio of a readout with its confidence
interval at any level, a Holm step-down, and the boundaries of a sequential design.

The design this fits (DESIGN.md section 6): the two arms run in interleaved blocks (A B A B ...),
and the *block*, not the request, is the unit of replication. Each metric arrives as a list of
blocks per arm, each block a list of per-request samples (TTFT, TPOT, ITL, E2E in seconds, lower is
better; throughput-type metrics, higher is better). Real blocks drift (a random block effect: the
machine, the page cache, a neighbour) and the samples have heavy right tails.

Methods (chosen by simulation; tests/unit/test_stats.py measures them):

* Medians (``p50``): Mann-Whitney U with the Hodges-Lehmann shift, computed on block-level
  summaries: the log of each block's median. The shift is the median of all pairwise differences
  candidate - baseline of those log medians, so exp(shift) is a ratio; the CI is the distribution-
  free (Moses) interval from the order statistics of those differences with the *exact* null
  distribution of U, and the p-value is the exact two-sided Mann-Whitney p (a permutation p when
  block summaries tie). Why blocks and not requests: a Mann-Whitney test on the pooled per-request
  samples treats correlated requests as independent. Measured on A/A data (log-normal samples,
  sigma 0.5, per-block random effect sigma_b) it says "different" far more often than alpha:
  4-6 % at sigma_b = 0, 7-15 % at sigma_b = 0.05 and 25-40 % at sigma_b = 0.1 (5-6 blocks of 50-100
  requests per arm). On block medians it holds alpha at every drift (measured 2-4 %). The price is
  granularity: with k blocks per arm a rank test cannot go below p = 2 / C(2k, k), so 3 blocks per
  arm can never give a 95 % verdict (``min_blocks_per_arm`` says how many a level needs: 4 at 95 %,
  5 at the Holm levels of two or three secondaries); below it there is no interval to judge by.
* Tails (``p95``, ``p99``) and ``mean``: bootstrap over blocks. Each replicate resamples the blocks
  of each arm with replacement, pools their samples and recomputes the statistic (the same linear-
  interpolation percentile as numpy). A plain percentile interval from so few blocks is too narrow:
  measured on A/A data its false "different" rate was 6-21 % (3-6 blocks per arm). So the interval
  is a Welch t interval with a bootstrap standard error (not a studentized "bootstrap-t": with 3-12
  blocks per arm there is no stable per-replicate standard error to studentize by, and a nested
  bootstrap would cost n_boot^2 resamples for little gain): the bootstrap variance of each arm's log
  statistic is scaled by k/(k-1) (the bootstrap's own downward bias), the two are added, and the
  half-width uses Student's t with Welch-Satterthwaite degrees of freedom (k-1 per arm).
  Measured A/A false rate 1-5.5 % (3-6 blocks of 20-600 requests, block sigma up to 0.15, and with
  heavier tails: log-normal sigma 1, Pareto 2.5, a 3 % mixture of 8x outliers). Fewer than
  ``MIN_BLOCKS_BOOTSTRAP`` blocks per arm give no estimate (with 2 blocks an arm has 3 distinct
  resamples), and neither does a percentile with fewer than ``MIN_TAIL_SAMPLES`` sample(s) expected beyond
  it in an arm (p95 needs 20 per arm, p99 100): that would be the sample maximum under another name.

What this module does not do: decide. The verdict rule (a CI against the equivalence margin),
the gatekeeping of the secondaries behind the primary with Holm among them, the looks of a
sequential design and every overrule live in advisor/experiments/judgement/judge.py; here are the
estimates, their intervals at any level, the Holm step-down of a family of p-values and the
group-sequential boundaries (``boundary_alphas``: Wang-Tsiatis family, O'Brien-Fleming delta 0,
delta 0.25, Pocock delta 1/2, computed once per design from the Brownian-motion approximation by
Monte Carlo with a fixed seed, so that the probability that *any* look's interval misses the true
ratio is alpha; see advisor/experiments/design/planning.py and benchmarks/stats_calibration.py).

Design advice that follows from the above (20 % effect, per-request sigma 0.5, block drift 5 %):
6 blocks x 200 requests per arm detect it in p50 (100 %) and p95 (96 %); p99 needs about 6 x 400
(92 %; 68 % at 6 x 200). With 3 blocks per arm the median can never be decided.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import combinations
from typing import Literal

import numpy as np

from advisor.experiments.result import Statistic

# Block readouts: one value per block (a rate over the block's own duration, a share of its
# requests). Judged by the rank test on the block values: each block is one sample, which is what
# the block as the unit of replication means.
BLOCK_STATISTICS = ("per_s", "ratio")
RANK_STATISTICS = ("p50", *BLOCK_STATISTICS)  # judged by Mann-Whitney / Hodges-Lehmann on blocks
MIN_BLOCKS = 2  # per arm, any method
MIN_BLOCKS_BOOTSTRAP = 3  # per arm, bootstrap over blocks (p95, p99, mean)
MIN_SAMPLES = 10  # per arm
MIN_TAIL_SAMPLES = 1  # per arm: samples expected beyond the percentile, n * (1 - q)
_QUANTILE = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
_EXACT_MAX_N = 60  # exact null distribution of U up to n1 + n2 blocks; normal beyond
_LOG_CAP = 50.0  # CI bounds are clipped to exp(+-50): "unbounded" yet finite (and JSON-safe)


# --------------------------------------------------------------------------------------------
# estimate


@dataclass(frozen=True)
class Estimate:
    """One statistic's candidate/baseline ratio from both arms' blocks, its two-sided p of "ratio =
    1", and its interval at any level (``interval``); or, in ``problem``, why the data give none."""

    statistic: Statistic
    method: str
    n_blocks: tuple[int, int]
    n_samples: tuple[int, int]
    baseline_value: float | None = None
    candidate_value: float | None = None
    ratio: float | None = None
    p_value: float | None = None
    problem: str | None = None
    # The data stay in this closure: an interval at another level (a Holm rank, a look) is computed
    # from the same resamples or order statistics, never from a second estimate.
    ci_at: Callable[[float], tuple[float, float] | None] | None = field(default=None, repr=False, compare=False)

    def interval(self, alpha: float) -> tuple[float, float] | None:
        """The CI of the ratio at level 1 - alpha; None where the data cannot reach that level."""
        return None if self.ci_at is None else self.ci_at(alpha)


def scipy_stats():
    """scipy.stats, imported where a test needs it: it costs 0.6-0.85 s on the 2-core host, and a bad
    input or a plan is answered before it (`python -X importtime` of `advisor experiment` with a bad input)."""
    from scipy import stats

    return stats


def estimate(
    baseline_blocks: Sequence[Sequence[float | None]],
    candidate_blocks: Sequence[Sequence[float | None]],
    statistic: Statistic = "p50",
    seed: int = 0,
    n_boot: int = 2000,
) -> Estimate:
    """The ratio candidate/baseline of `statistic`; see the module docstring for the methods."""
    if statistic not in ("p50", "p95", "p99", "mean", *BLOCK_STATISTICS):
        raise ValueError(f"unknown statistic {statistic!r} (use p50, p95, p99, mean, or per_s or ratio "
                         "for one value per block)")
    if n_boot < 200:
        raise ValueError(f"n_boot must be at least 200, got {n_boot}")
    base = Estimate(statistic=statistic, method=_method_text(statistic),
                    n_blocks=(len(baseline_blocks), len(candidate_blocks)),
                    n_samples=(sum(len(b) for b in baseline_blocks), sum(len(b) for b in candidate_blocks)))

    per_block = statistic in BLOCK_STATISTICS
    problem = (_data_problem("baseline", baseline_blocks, per_block)
               or _data_problem("candidate", candidate_blocks, per_block))
    if problem:
        return replace(base, problem=problem)
    a_blocks = [np.asarray(b, dtype=float) for b in baseline_blocks]
    b_blocks = [np.asarray(b, dtype=float) for b in candidate_blocks]
    a_all, b_all = np.concatenate(a_blocks), np.concatenate(b_blocks)
    # a block readout's point value is the median over blocks (the ratio estimated is of medians)
    point = "p50" if per_block else statistic
    valued = replace(base, baseline_value=_point(a_all, point), candidate_value=_point(b_all, point))
    for arm, v in (("baseline", valued.baseline_value), ("candidate", valued.candidate_value)):
        if v <= 0:
            return replace(valued, problem=f"the {arm} {statistic} is 0, so a ratio is undefined")

    if statistic in RANK_STATISTICS:
        est = _rank_estimate(a_blocks, b_blocks)
    else:
        est = _bootstrap_estimate(a_blocks, b_blocks, statistic, seed, n_boot)
    if isinstance(est, str):
        return replace(valued, problem=est)
    log_ratio, p_value, ci_at = est
    return replace(valued, ratio=math.exp(log_ratio), p_value=p_value, ci_at=ci_at)


def _method_text(statistic: str) -> str:
    if statistic in BLOCK_STATISTICS:
        return ("one value per block (over the block's own duration); Mann-Whitney U with Hodges-Lehmann "
                "shift on the log block values: a ratio of medians with its exact distribution-free CI")
    if statistic == "p50":
        return ("Mann-Whitney U with Hodges-Lehmann shift on log block medians "
                "(exact distribution-free CI; the block is the unit)")
    what = "pooled mean" if statistic == "mean" else f"pooled {statistic}"
    return (f"bootstrap over blocks of the {what}; Welch t interval of the log ratio with the bootstrap "
            "standard error (k/(k-1) variance correction)")


def _data_problem(arm: str, blocks: Sequence[Sequence[float | None]], per_block: bool = False) -> str | None:
    if len(blocks) < MIN_BLOCKS:
        return (f"the {arm} has {len(blocks)} block(s); at least {MIN_BLOCKS} per arm are needed, "
                "since the block is the unit of replication")
    n = sum(len(b) for b in blocks)
    empty = [i + 1 for i, b in enumerate(blocks) if len(b) == 0]
    if empty:
        return f"{arm} block(s) {empty} have no samples: missing data never passes"
    if per_block and any(len(b) != 1 for b in blocks):
        raise ValueError("a block readout (per_s, ratio) takes exactly one value per block")
    if not per_block and n < MIN_SAMPLES:
        return f"the {arm} has {n} samples; at least {MIN_SAMPLES} per arm are needed"
    bad = 0
    negative = 0
    for block in blocks:
        try:
            arr = np.asarray(block, dtype=float)  # None -> NaN
        except (TypeError, ValueError):
            bad += len(block)
            continue
        bad += int((~np.isfinite(arr)).sum())
        negative += int((arr < 0).sum())
    if bad:
        return f"the {arm} has {bad} of {n} samples missing, NaN or infinite: missing data never passes"
    if negative:
        return f"the {arm} has {negative} negative samples: not a valid latency or throughput"
    return None


def _point(x: np.ndarray, statistic: str) -> float:
    if statistic == "mean":
        return float(np.mean(x))
    return float(np.percentile(x, 100 * _QUANTILE[statistic]))


# ---- medians: Mann-Whitney / Hodges-Lehmann on block summaries -------------------------------


def _rank_estimate(a_blocks, b_blocks):
    a_med = np.array([np.median(b) for b in a_blocks])
    b_med = np.array([np.median(b) for b in b_blocks])
    if (a_med <= 0).any() or (b_med <= 0).any():
        return "a block median is 0, so its log (and the ratio) is undefined"
    la, lb = np.log(a_med), np.log(b_med)
    n1, n2 = len(la), len(lb)
    diffs = np.sort((lb[:, None] - la[None, :]).ravel())
    shift = float(np.median(diffs))
    p_value = _mw_p(la, lb, diffs)

    def ci_at(level_alpha: float) -> tuple[float, float] | None:
        c = _moses_c(n1, n2, level_alpha)
        if c is None:
            return None
        return (math.exp(diffs[c]), math.exp(diffs[len(diffs) - 1 - c]))

    return shift, p_value, ci_at


@lru_cache(maxsize=512)
def _u_cdf(n1: int, n2: int) -> np.ndarray:
    """P(U <= u), u = 0..n1*n2, for the Mann-Whitney U of samples of n1 and n2 without ties."""
    # f[j] = counts of U over arrangements of i (sample 1) and j (sample 2) items. The largest item
    # comes from sample 1 (it beats all j of sample 2: U += j) or from sample 2 (U += 0).
    prev = [np.ones(1) for _ in range(n2 + 1)]  # i = 0
    for i in range(1, n1 + 1):
        cur = [np.ones(1)]
        for j in range(1, n2 + 1):
            a, b = prev[j], cur[j - 1]
            out = np.zeros(i * j + 1)
            out[j:j + len(a)] += a
            out[:len(b)] += b
            cur.append(out)
        prev = cur
    counts = prev[n2]
    cdf = np.cumsum(counts) / counts.sum()
    cdf.setflags(write=False)
    return cdf


def _moses_c(n1: int, n2: int, alpha: float) -> int | None:
    """Largest c with P(U <= c) <= alpha/2; the CI is [D_(c+1), D_(N-c)]. None: not reachable."""
    if n1 + n2 <= _EXACT_MAX_N:
        cdf = _u_cdf(n1, n2)
        ok = np.nonzero(cdf <= alpha / 2 + 1e-12)[0]
        return int(ok[-1]) if len(ok) else None
    mu = n1 * n2 / 2
    sd = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    c = math.floor(mu - scipy_stats().norm.ppf(1 - alpha / 2) * sd - 0.5)
    return c if c >= 0 else None


def _mw_p(la: np.ndarray, lb: np.ndarray, diffs: np.ndarray) -> float:
    n1, n2 = len(la), len(lb)
    if (diffs == 0).any() or len(np.unique(np.concatenate([la, lb]))) < n1 + n2:
        if math.comb(n1 + n2, n1) <= 20_000:
            return _mw_p_ties_exact(la, lb)
        p = scipy_stats().mannwhitneyu(lb, la, method="asymptotic").pvalue
        return 1.0 if not np.isfinite(p) else float(p)
    u = int((diffs > 0).sum())  # pairs where the candidate block is higher
    if n1 + n2 <= _EXACT_MAX_N:
        cdf = _u_cdf(n1, n2)
        lower = cdf[u]
        upper = 1 - (cdf[u - 1] if u > 0 else 0.0)
        return float(min(1.0, 2 * min(lower, upper)))
    return float(scipy_stats().mannwhitneyu(lb, la, method="asymptotic").pvalue)


def _mw_p_ties_exact(la: np.ndarray, lb: np.ndarray) -> float:
    """Exact two-sided permutation p of U (ties count 1/2) over all block-label assignments."""
    pooled = np.concatenate([la, lb])
    n, n2 = len(pooled), len(lb)
    gt = (pooled[:, None] > pooled[None, :]).astype(float) + 0.5 * (pooled[:, None] == pooled[None, :])
    mean_u = len(la) * n2 / 2

    def u_of(idx) -> float:
        mask = np.zeros(n, bool)
        mask[list(idx)] = True
        return float(gt[np.ix_(mask, ~mask)].sum())

    observed = abs(u_of(range(n - n2, n)) - mean_u)
    devs = np.array([abs(u_of(c) - mean_u) for c in combinations(range(n), n2)])
    return float(np.mean(devs >= observed - 1e-9))


# ---- tails and means: bootstrap over blocks --------------------------------------------------


def _bootstrap_estimate(a_blocks, b_blocks, statistic, seed, n_boot):
    ka, kb = len(a_blocks), len(b_blocks)
    if min(ka, kb) < MIN_BLOCKS_BOOTSTRAP:
        return (f"{ka} baseline and {kb} candidate blocks: a bootstrap over fewer than "
                f"{MIN_BLOCKS_BOOTSTRAP} blocks per arm gives a falsely narrow interval")
    if statistic != "mean":
        q = _QUANTILE[statistic]
        for arm, blocks in (("baseline", a_blocks), ("candidate", b_blocks)):
            n = sum(len(b) for b in blocks)
            if n * (1 - q) < MIN_TAIL_SAMPLES - 1e-9:
                need = math.ceil(MIN_TAIL_SAMPLES / (1 - q) - 1e-9)
                return (f"the {arm} has {n} samples; a {statistic} needs at least {need} per arm "
                        f"({MIN_TAIL_SAMPLES} beyond the percentile) to be resampled honestly")
    rng = np.random.default_rng(seed)
    ta = _boot_replicates(a_blocks, statistic, rng, n_boot)
    tb = _boot_replicates(b_blocks, statistic, rng, n_boot)
    if (ta <= 0).any() or (tb <= 0).any():
        return f"the {statistic} is 0 in some bootstrap resamples, so the ratio is undefined"
    la, lb = np.log(ta), np.log(tb)
    theta = math.log(_point(np.concatenate(b_blocks), statistic)) - math.log(
        _point(np.concatenate(a_blocks), statistic))
    va = float(la.var(ddof=1)) * ka / (ka - 1)
    vb = float(lb.var(ddof=1)) * kb / (kb - 1)
    se = math.sqrt(va + vb)
    if se == 0:
        df = math.inf
    else:
        df = (va + vb) ** 2 / ((va ** 2 / (ka - 1) if va else 0.0) + (vb ** 2 / (kb - 1) if vb else 0.0))
    if se == 0:
        p_value = 1.0 if theta == 0 else 0.0
    else:
        p_value = float(2 * scipy_stats().t.sf(abs(theta) / se, df))

    def ci_at(level_alpha: float) -> tuple[float, float]:
        half = float(scipy_stats().t.ppf(1 - level_alpha / 2, df)) * se if se else 0.0
        # a tiny level on few blocks can ask for an astronomically wide interval: keep it finite
        return (math.exp(max(theta - half, -_LOG_CAP)), math.exp(min(theta + half, _LOG_CAP)))

    return theta, p_value, ci_at


def _boot_replicates(blocks: list[np.ndarray], statistic: str, rng, n_boot: int) -> np.ndarray:
    """The statistic of the pooled samples of n_boot resamples (with replacement) of the blocks."""
    k = len(blocks)
    picks = rng.integers(0, k, size=(n_boot, k))
    counts = np.bincount((picks + k * np.arange(n_boot)[:, None]).ravel(),
                         minlength=n_boot * k).reshape(n_boot, k)
    sizes = np.array([len(b) for b in blocks], dtype=float)
    if statistic == "mean":
        sums = np.array([b.sum() for b in blocks])
        return (counts @ sums) / (counts @ sizes)
    q = _QUANTILE[statistic]
    values = np.concatenate(blocks)
    owner = np.repeat(np.arange(k), sizes.astype(int))
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    n = len(values)
    # seen[i, j]: samples of block j among the i+1 smallest pooled samples. In a resample with
    # block counts c, the cumulative multiplicity of the sorted samples is cw[i] = seen[i] @ c, and
    # replicated position p (0-based) falls on the first i with cw[i] > p. numpy's linear
    # percentile needs positions floor(h) and floor(h) + 1, h = (total - 1) q: found by a binary
    # search over i for every resample at once, O(n_boot k log n) instead of O(n_boot n).
    seen = np.cumsum(owner[:, None] == np.arange(k)[None, :], axis=0, dtype=np.int64)
    total = counts @ sizes.astype(np.int64)
    h = (total - 1) * q
    j0 = np.floor(h).astype(np.int64)
    frac = h - j0
    targets = np.concatenate([j0, j0 + 1])
    cts = np.concatenate([counts, counts])
    lo = np.zeros(len(targets), dtype=np.int64)
    hi = np.full(len(targets), n - 1, dtype=np.int64)
    for _ in range(max(1, int(n).bit_length())):
        mid = (lo + hi) // 2
        above = np.einsum("ij,ij->i", seen[mid], cts) > targets
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid + 1)
    i0, i1 = lo[:n_boot], np.minimum(lo[n_boot:], n - 1)
    out = values[i0] + frac * (values[i1] - values[i0])
    return out


# ---- levels ----------------------------------------------------------------------------------


def pct(level: float) -> str:
    return f"{100 * level:.4g}%"


def min_blocks_per_arm(statistic: Statistic = "p50", alpha: float = 0.05) -> int:
    """Fewest blocks per arm with which an estimate can have an interval at level 1 - alpha."""
    if statistic not in RANK_STATISTICS:
        return MIN_BLOCKS_BOOTSTRAP
    k = MIN_BLOCKS
    while _moses_c(k, k, alpha) is None:
        k += 1
    return k


def unreachable(statistic: str, alpha: float, n_blocks: tuple[int, int]) -> str:
    """Why a rank test on these blocks has no interval at level 1 - alpha, and how many it needs."""
    need = min_blocks_per_arm(statistic, alpha)  # type: ignore[arg-type]
    return (f"{n_blocks[0]} baseline and {n_blocks[1]} candidate blocks: a rank test on so few blocks "
            f"cannot reach {pct(1 - alpha)} confidence; run at least {need} blocks per arm")


@dataclass(frozen=True)
class HolmRank:
    """One hypothesis of a Holm family: its adjusted p and the nominal level its rank is tested at."""

    adjusted_p: float | None  # None: no p-value (it ranks last and is never rejected)
    alpha: float | None


def holm(p_values: Sequence[float | None], alpha: float = 0.05) -> list[HolmRank]:
    """Holm's step-down over a family, in the order given: the r-th smallest of m p-values gets the
    adjusted p max over ranks <= r of min(1, (m - j + 1) p_(j)) and the level alpha / (m - r + 1)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: (p_values[i] is None, p_values[i] if p_values[i] is not None else 1.0, i))
    out: list[HolmRank] = [HolmRank(None, None)] * m
    running = 0.0
    for rank, i in enumerate(order, start=1):
        p = p_values[i]
        if p is None:
            continue
        running = max(running, min(1.0, (m - rank + 1) * p))
        out[i] = HolmRank(running, alpha / (m - rank + 1))
    return out


# --------------------------------------------------------------------------------------------
# boundaries of a group-sequential design


Boundary = Literal["obrien-fleming", "wang-tsiatis", "pocock"]


@lru_cache(maxsize=128)
def boundary_alphas(min_blocks: int, max_blocks: int, alpha: float = 0.05,
                    boundary: Boundary = "obrien-fleming", n_paths: int = 200_000) -> tuple[float, ...]:
    """Nominal two-sided level of each look k = min_blocks..max_blocks (blocks per arm).

    Brownian-motion approximation: the score after k blocks is a sum of k independent increments,
    Z_k = S_k / sqrt(k). Pocock: one critical value c for every look; O'Brien-Fleming:
    c_k = C sqrt(max_blocks / k). c or C is set so that P(|Z_k| > c_k at some look) = alpha,
    by Monte Carlo with a fixed seed (deterministic; error in alpha about 5e-4).
    """
    if not 1 <= min_blocks <= max_blocks:
        raise ValueError(f"need 1 <= min_blocks <= max_blocks, got {min_blocks}, {max_blocks}")
    rng = np.random.default_rng(20240601)
    looks = np.arange(min_blocks, max_blocks + 1)
    steps = np.diff(np.concatenate([[0], looks])).astype(float)
    s = np.cumsum(rng.standard_normal((n_paths, len(looks))) * np.sqrt(steps), axis=1)
    if boundary == "pocock":
        c = float(np.quantile(np.abs(s / np.sqrt(looks)).max(axis=1), 1 - alpha))
        crit = np.full(len(looks), c)
    elif boundary in ("obrien-fleming", "wang-tsiatis"):
        # Wang-Tsiatis: c_k = C (k / max_blocks)^(delta - 1/2); delta 0 is O'Brien-Fleming, 1/2 Pocock
        delta = 0.0 if boundary == "obrien-fleming" else 0.25
        shape = (looks / max_blocks) ** (delta - 0.5)
        big_c = float(np.quantile((np.abs(s / np.sqrt(looks)) / shape).max(axis=1), 1 - alpha))
        crit = big_c * shape
    else:
        raise ValueError(f"unknown boundary {boundary!r} (use obrien-fleming, wang-tsiatis or pocock)")
    if len(looks) == 1:
        return (alpha,)
    return tuple(float(2 * scipy_stats().norm.sf(c)) for c in crit)
