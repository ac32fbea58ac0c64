#!/usr/bin/env bash
# All tests: unit, integration (a real Prometheus) and e2e (the real CPU vLLM). Extra args go to pytest,
# whose exit code is this script's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest tests -q "$@"
