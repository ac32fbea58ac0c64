"""A target's measured noise: what a deliberate A/A run (`advisor experiment --aa`) found, per
readout, stored beside the target's journal so that later plans start from it.

Per readout and block, the log of the block's statistic (its median, p95, p99 or mean; a block
readout's one value). The spread of those between blocks of one arm, around the arm's own mean, is
the block log-SD; each block's sampling SD is its statistic's bootstrap SD within the block. What
the sampling part does not explain is drift (advisor/experiments/design/planning.py: drift does not shrink
with more requests per block, sampling does).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ValidationError

from advisor import readout_vocabulary
from advisor.errors import AdvisorError
from advisor.experiments.design import readouts
from advisor.experiments import stats
from advisor.experiments.design.planning import Noise
from advisor.experiments.result import ReadoutNoise
from probes.http import redact_url

FILE = "calibration.json"
_BOOT = 200


class Apart(BaseModel):
    """How far apart an A/A run found the two environments it compared: its primary's ratio."""
    baseline: str  # the arms' URLs (credentials redacted): an A/B between other endpoints is not covered
    candidate: str
    readout: str
    ratio: float | None
    ci: tuple[float, float] | None
    verdict: str


class Calibration(BaseModel):
    experiment: str
    deployment: str
    measured_at: datetime
    workload: str
    requests_per_block: int
    readouts: list[ReadoutNoise]
    apart: Apart | None = None

    def likeness(self, baseline: str, candidate: str) -> str:
        """For an A/B between the endpoints baseline and candidate: how far apart this A/A run found
        them, or that it compared other environments."""
        a = self.apart
        when = f"A/A calibration {self.experiment} ({self.measured_at:%Y-%m-%d %H:%M} UTC)"
        if a is None or (a.baseline, a.candidate) != (redact_url(baseline.rstrip("/")),
                                                       redact_url(candidate.rstrip("/"))):
            return (f"the {when} did not compare these two endpoints: how alike their environments are is "
                    "unmeasured; run advisor experiment --aa with the candidate endpoint serving the baseline's "
                    "configuration first")
        ci = f", 95% CI [{a.ci[0]:.3f}, {a.ci[1]:.3f}]" if a.ci else ""
        ratio = "-" if a.ratio is None else f"{a.ratio:.3f}"
        return (f"the two endpoints' environments, both serving the baseline's configuration ({when}): "
                f"{a.readout} ratio {ratio}{ci}: {a.verdict}")

    def noise(self, metric: str, statistic: str) -> Noise | None:
        for r in self.readouts:
            if (r.metric, r.statistic) == (metric, statistic):
                return Noise(drift=r.drift_sd, sampling=r.sampling_sd, requests=self.requests_per_block,
                             source=f"A/A calibration {self.experiment} ({self.measured_at:%Y-%m-%d %H:%M} UTC, "
                                    f"{r.blocks} blocks, workload {self.workload})")
        return None


def _statistic(values: np.ndarray, statistic: str) -> float:
    return stats._point(values, statistic)  # the judge's own definition of each statistic


def _sampling_var(values: np.ndarray, statistic: str, rng) -> float | None:
    if len(values) < 5:
        return None
    idx = rng.integers(0, len(values), size=(_BOOT, len(values)))
    res = values[idx]
    if statistic == "mean":
        stat = res.mean(axis=1)
    else:
        stat = np.percentile(res, 100 * stats._QUANTILE[statistic], axis=1)
    if (stat <= 0).any():
        return None
    return float(np.log(stat).var(ddof=1))


def readout_noise(metric: str, statistic: str, arms: Mapping[str, Sequence[Sequence]], slo=None) -> ReadoutNoise | None:
    """The noise of one readout from each arm's blocks of request records; None when a block lacks it."""
    rng = np.random.default_rng(11)
    devs: list[float] = []
    sampling: list[float] = []
    count = 0
    for blocks in arms.values():
        logs = []
        for recs in blocks:
            values = readouts.block_samples(recs, metric, statistic, slo)
            if not values or any(v is None or not math.isfinite(v) or v <= 0 for v in values):
                return None
            arr = np.asarray(values, dtype=float)
            if readout_vocabulary.is_block_readout(metric, statistic):
                logs.append(math.log(arr[0]))
                continue
            stat = _statistic(arr, statistic)
            if stat <= 0:
                return None
            logs.append(math.log(stat))
            v = _sampling_var(arr, statistic, rng)
            if v is not None:
                sampling.append(v)
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            devs += [x - mean for x in logs]
            count += len(logs) - 1  # degrees of freedom: each arm's own mean is estimated
    if count < 2:
        return None
    block_var = sum(d * d for d in devs) / count
    sampling_var = float(np.mean(sampling)) if sampling else 0.0
    return ReadoutNoise(metric=metric, statistic=statistic, block_sd=math.sqrt(block_var),
                        sampling_sd=math.sqrt(min(sampling_var, block_var)),
                        drift_sd=math.sqrt(max(0.0, block_var - sampling_var)), blocks=len(devs))


def measure(experiment: str, deployment: str, workload: str, requests_per_block: int,
            by_block: Mapping[tuple[str, int], Sequence], slo=None) -> Calibration:
    """Every readout of the vocabulary that the blocks define."""
    arms: dict[str, list] = {}
    for (arm, _), recs in sorted(by_block.items()):
        arms.setdefault(arm, []).append(recs)
    found = []
    for metric, statistics in readout_vocabulary.VOCABULARY.items():
        if metric in readout_vocabulary.SEARCH_READOUTS:  # not a block's readout: no block noise
            continue
        for statistic in statistics:
            r = readout_noise(metric, statistic, arms, slo)
            if r is not None:
                found.append(r)
    return Calibration(experiment=experiment, deployment=deployment, measured_at=datetime.now(timezone.utc),
                       workload=workload, requests_per_block=requests_per_block, readouts=found)


def save(directory: Path, cal: Calibration) -> Path:
    """Written beside the destination and renamed into place: never half a file."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(cal.model_dump_json(indent=2))
    os.replace(tmp, path)
    return path


def no_calibration_note() -> str:
    return ("no A/A calibration of these two endpoints: how alike their environments are is unmeasured (the "
            "endpoints launcher cannot start a fresh baseline replica beside the candidate); run advisor "
            "experiment --aa with the candidate endpoint serving the baseline's configuration first")


class CalibrationError(AdvisorError):
    pass


def load(directory: Path) -> Calibration | None:
    """The stored calibration; None when there is none (a plan then uses the conservative default)."""
    path = directory / FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CalibrationError(f"cannot read the A/A calibration {path}: {e.strerror}") from None
    try:
        return Calibration.model_validate_json(text)
    except (ValidationError, ValueError):
        raise CalibrationError(f"the A/A calibration {path} is not one the advisor wrote; run advisor experiment "
                               "--aa again to replace it") from None
