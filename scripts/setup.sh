#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine (run as root): Prometheus, the advisor's venv at
# .venv, the CPU vLLM engine with its tiny model (scripts/setup-engine.sh), and llama.cpp's
# llama-server, llama-quantize and llama-imatrix with the tiny model's GGUF files (scripts/setup-llamacpp.sh).
# A second run only checks, in a few seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

log() { printf '[setup] %s\n' "$*" >&2; }
# pip repeats "WARNING: Location ... is ignored" for every package when a mirror is configured.
# With pipefail the pipeline still fails when pip does.
quiet_pip() { "$@" 2>&1 | { grep -v '^WARNING: Location .* is ignored' || true; }; }

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
    || ! command -v prometheus-alertmanager >/dev/null || ! command -v amtool >/dev/null; then
  log "installing Debian's prometheus and prometheus-alertmanager (~30 s)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null
else
  log "prometheus ok: $(command -v prometheus); alertmanager ok: $(command -v prometheus-alertmanager)"
fi

stamp=.venv/.pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing the advisor into .venv (pyproject.toml changed or venv missing)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  quiet_pip .venv/bin/pip install -q --upgrade pip
  quiet_pip .venv/bin/pip install -q -e '.[test]'
  echo "$want" > "$stamp"
else
  log "advisor venv ok: .venv"
fi

# llama.cpp's build is CPU-bound and the next steps mostly wait on downloads and disks: it runs
# beside them, and the GGUF files are made once the tiny model exists.
# Its compilers come first, in the foreground: two apt-get at once would fight over dpkg's lock.
if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null || ! command -v make >/dev/null; then
  log "installing Debian's cmake and g++ (llama.cpp's build)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends cmake g++ make >/dev/null
fi
bash scripts/setup-llamacpp.sh --binaries-only &
llamacpp=$!
bash scripts/setup-postgres.sh
bash scripts/setup-browser.sh
bash scripts/setup-engine.sh
wait "$llamacpp" || { log "building llama.cpp failed (its output is above)"; exit 1; }
bash scripts/setup-llamacpp.sh
