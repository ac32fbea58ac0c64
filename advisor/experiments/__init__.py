"""Single-mechanism A/B experiments against a real deployment, in the order they happen:

* `design/`: the deployment spec, the plan (knob, value, workload, block order, readouts), how many
  blocks it needs (planning, with a target's measured noise from calibration), the manifest.
* `arms/`: where the arms run. The `Launcher` protocol (protocol.py), one module per launcher
  (local.py, endpoints.py), and what they share: the journal, process ownership and recovery, the
  arms' likeness (arm_check.py), room for a replica, an arm's server readouts.
* `judgement/`: the only place a verdict is decided (judge.py), with when a verdict is out of reach
  (reach.py) and the quality guard (quality.py).
* `run/`: the blocks (runner.py), the experiment use case around them (session.py), from a
  deployment to a design and a launcher (setup.py), the generator's pacing trial, a diagnosis's
  checks proved (checks.py).

`result.py` (the typed result every layer reads) and `stats.py` (estimates, intervals, Holm,
sequential boundaries) sit below all four. Each sub-package imports only from those below it, in
the order design, arms, judgement, run (tests/unit/test_import_layers.py)."""
