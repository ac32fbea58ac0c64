#!/usr/bin/env bash
# All tests: unit and integration (a real Prometheus, PostgreSQL) four at a time, a module per
# worker so that each module-scoped server starts once; then e2e (the real CPU vLLM, a real browser)
# one at a time, since they measure a CPU-bound engine. Tests that run the `advisor` command fork it
# from a pre-imported interpreter (tests/support/zygote.py; ADVISOR_TEST_SUBPROCESS=1 gives each a
# fresh one instead). Options (-x, -k EXPR ...) go to both runs; given test paths, just those run,
# one at a time. The exit code is non-zero when either run failed (a run that -k leaves empty is
# not a failure). ADVISOR_TEST_COVERAGE=1 runs both under coverage.py (subprocesses and forked
# children included) and ends with its report of advisor/ and probes/, also as HTML in
# coverage-report/; slower, and the e2e's timing is then measured with the tracer on.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
for arg in "$@"; do
  if [ -e "${arg%%::*}" ]; then exec .venv/bin/python -m pytest -q "$@"; fi
done
py=(.venv/bin/python)
if [ -n "${ADVISOR_TEST_COVERAGE:-}" ]; then
  export COVERAGE_FILE="$PWD/.coverage"  # absolute: subprocesses write theirs beside it, whatever their folder
  rm -f .coverage .coverage.*
  py=(.venv/bin/python -m coverage run)
fi
run() { "${py[@]}" -m pytest "$@" || { local rc=$?; [ "$rc" -eq 5 ] && return 0; return "$rc"; }; }
rc=0
run tests/unit tests/integration -q -n 4 --dist loadfile --durations=40 "$@" || rc=$?
run tests/e2e -q --durations=40 "$@" || rc=$((rc ? rc : $?))
if [ -n "${ADVISOR_TEST_COVERAGE:-}" ]; then
  .venv/bin/python -m coverage combine -q
  .venv/bin/python -m coverage report --sort=cover | tail -n 60
  .venv/bin/python -m coverage html -q -d coverage-report
fi
exit "$rc"
