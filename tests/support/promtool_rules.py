"""`promtool test rules` over a generated scenario (tests/scenarios/generate.py): the scenario's own
samples as promtool's input series, and the alerts that fire at one instant compared with a set.

promtool replays input series at a fixed interval from time 0 and evaluates every rule group at
each step, as Prometheus would; ALERTS (here with `for: 0s`) then says which alerts fire at the
instant asked. The series start early enough for the window to be full at that instant."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import yaml

from tests.scenarios import generate as gen


def input_series(families, stamps: np.ndarray, t0: float, t1: float, interval: float) -> list[dict]:
    """Every series' samples at t0, t0 + interval, ... t1, in promtool's notation ('_' for none).
    Raises ValueError when the scenario's samples are not on that grid there."""
    grid = np.arange(t0, t1 + interval / 2, interval)
    index = {float(t): i for i, t in enumerate(stamps)}
    if any(float(t) not in index for t in grid):
        raise ValueError("the scenario's samples are not on a regular grid before this instant")
    at = [index[float(t)] for t in grid]
    out = []
    for fam in families:
        for key in sorted(fam.series):
            s = fam.series[key]
            for c in s.columns:
                vals = c.values[at]
                if np.isnan(vals).all():
                    continue
                text = " ".join("_" if math.isnan(v) else repr(float(v)) for v in vals.tolist())
                out.append({"series": f"{fam.name}{c.suffix}{{{gen._labelstr({**s.labels, **c.extra})}}}",
                            "values": text})
    return out


def firing(rules_file: Path, families, stamps: np.ndarray, at: float, window_s: float, interval: float,
           expected: set[str], work: Path) -> subprocess.CompletedProcess:
    """promtool's verdict on whether exactly the alerts named in `expected` fire at `at`."""
    steps = int(math.ceil((window_s * 2 + 120) / interval))
    t0 = at - steps * interval
    test = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": f"{int(interval)}s",
        "tests": [{
            "interval": f"{int(interval)}s",
            "input_series": input_series(families, stamps, t0, at, interval),
            "promql_expr_test": [{
                "expr": 'count by (alertname) (ALERTS{alertstate="firing"})',
                "eval_time": f"{int(at - t0)}s",
                "exp_samples": [{"labels": f'{{alertname="{a}"}}', "value": 1} for a in sorted(expected)],
            }],
        }],
    }
    path = work / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
