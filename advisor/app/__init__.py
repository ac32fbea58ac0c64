"""The use cases, each one service that every front door calls.

`cli/`, `web/`, `fleet/` (the schedule) and `localstack` adapt these and nothing more: they turn
their input into a typed request, call the service in process, and show its typed result. None of
them assembles another command's argv or repeats a sequence written here.

- `snapshot`: one snapshot of a target, from Prometheus or an engine's /metrics.
- `diagnose`: snapshot, rules, SLOs, cost, the top checks' experiments, saved.
- `experiment`: one A/B (or A/A) experiment, from its request to its stored result.
- `jobs`: experiments run in a supervised worker process (the dashboard's actions).
- `watched`: the experiments of a watched deployment (the dashboard's actions).
- `weekly`: the weekly report of the fleet.

The modules are imported one by one (no re-exports here): `advisor diagnose --help` loads none.
"""
