#!/usr/bin/env bash
# All tests: unit and integration (a real Prometheus, PostgreSQL) four at a time, a module per
# worker so that each module-scoped server starts once, and beside them the e2e tests marked
# `untimed` (counts, tokens and flags read off a real engine, never a latency or a verdict, so that
# a busy host cannot change them) one at a time, their output printed when they end; then the rest
# of e2e (the real CPU vLLM, a real browser) one at a time and alone, since they measure a CPU-bound
# engine. Tests that run the `advisor` command fork it from a pre-imported interpreter
# (tests/support/zygote.py; ADVISOR_TEST_SUBPROCESS=1 gives each a fresh one instead). Options (-x,
# -k EXPR ...) go to every run (given -m, e2e runs once, after the others, and takes what it
# selects); given test paths, just those run, one at a time. The exit code is non-zero when any run
# failed (a run that -k leaves empty is not a failure). ADVISOR_TEST_COVERAGE=1 runs them under
# coverage.py (subprocesses and forked children included) and ends with its report of advisor/ and
# probes/, also as HTML in coverage-report/; slower, and the e2e's timing is then measured with the
# tracer on.
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
split=(-m "not untimed")
for arg in "$@"; do case "$arg" in -m*) split=() ;; esac; done
rc=0
untimed_log=$(mktemp)
trap 'rm -f "$untimed_log"' EXIT
if [ "${#split[@]}" -gt 0 ]; then
  run tests/e2e -q -m untimed --durations=20 "$@" >"$untimed_log" 2>&1 &
  untimed=$!
fi
run tests/unit tests/integration -q -n 4 --dist loadfile --durations=40 "$@" || rc=$?
if [ "${#split[@]}" -gt 0 ]; then
  wait "$untimed" || rc=$((rc ? rc : $?))
  echo "--- e2e marked untimed, run beside the unit and integration tests:"
  cat "$untimed_log"
fi
run tests/e2e -q "${split[@]}" --durations=40 "$@" || rc=$((rc ? rc : $?))
if [ -n "${ADVISOR_TEST_COVERAGE:-}" ]; then
  .venv/bin/python -m coverage combine -q
  .venv/bin/python -m coverage report --sort=cover | tail -n 60
  .venv/bin/python -m coverage html -q -d coverage-report
fi
exit "$rc"
