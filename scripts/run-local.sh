#!/usr/bin/env bash
# The main job on a local default: a real CPU vLLM made to queue, Prometheus watching it, the advisor's probe.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m advisor.localstack "$@"
