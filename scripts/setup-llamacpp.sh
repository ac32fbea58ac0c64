#!/usr/bin/env bash
# llama.cpp, the second real engine: llama-server (with --metrics), llama-quantize and llama-imatrix,
# built for this CPU from the llama.cpp sources inside llama-cpp-python's source package on PyPI
# (its own server has no llamacpp: metrics), with Debian's cmake and g++; then the tiny model as
# GGUF files: F16 (written by scripts/build_tiny_gguf.py), Q8_0, Q4_K_M, IQ4_XS with an imatrix, and
# a mixed per-tensor recipe in the Unsloth Dynamic style (UD-Q4_K_XL: Q4_K_M with the imatrix, Q8_0
# on attn_k, attn_v, the first layer's ffn_down and the embeddings).
# Idempotent and cached under $ADVISOR_HOME: a second run only checks. The build takes about 11
# minutes on 2 cores (22 CPU-minutes), so scripts/setup.sh runs it (--binaries-only) beside the
# downloads of the other steps and makes the model files after them.
set -euo pipefail
binaries_only=0
[ "${1:-}" = "--binaries-only" ] && binaries_only=1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
ADVISOR_HOME=${ADVISOR_HOME:-$HOME/.cache/llm-advisor}
version=${ADVISOR_LLAMA_CPP_PYTHON_VERSION:-0.3.36}
prefix=${ADVISOR_LLAMA_CPP:-$ADVISOR_HOME/llama.cpp-$version}
models=${ADVISOR_TINY_GGUF:-$ADVISOR_HOME/tiny-llama-gguf}
tiny=${ADVISOR_TINY_MODEL:-$ADVISOR_HOME/tiny-llama}
tools="llama-server llama-quantize llama-imatrix"

log() { printf '[setup-llamacpp] %s\n' "$*" >&2; }

# What the build is made with: a cached build made otherwise (an older script) is rebuilt.
# AMX off: on a host with amx_int8 (Sapphire Rapids), -march=native compiles ggml's AMX kernels in,
# and llama-server died of SIGSEGV in ggml_backend_amx_mul_mat on the tiny model's first decode.
flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
stamp="GGML_NATIVE=ON $flags"

built() {
  for t in $tools; do [ -x "$prefix/bin/$t" ] || return 1; done
  [ "$(cat "$prefix/BUILD" 2>/dev/null)" = "$stamp" ]
}

if ! built; then
  if ! command -v cmake >/dev/null || ! command -v g++ >/dev/null; then
    log "installing Debian's cmake and g++"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends cmake g++ make >/dev/null
  fi
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  log "fetching llama-cpp-python==$version's source package (its vendor/llama.cpp)"
  "$root/.venv/bin/pip" download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" \
    2>&1 | { grep -v '^WARNING: Location .* is ignored' || true; }
  tar xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work" "llama_cpp_python-$version/vendor/llama.cpp"
  src="$work/llama_cpp_python-$version/vendor/llama.cpp"
  log "building $tools with $(nproc) jobs (a few minutes)"
  # No network at build time (no prebuilt web UI, no curl or OpenSSL); static, so the binaries can be
  # cached alone; tuned for this CPU (GGML_NATIVE), as the engine runs where it is built.
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" >"$work/cmake.log" 2>&1 \
    || { tail -30 "$work/cmake.log" >&2; exit 1; }
  # shellcheck disable=SC2086
  cmake --build "$work/build" -j "$(nproc)" --target $tools >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; exit 1; }
  mkdir -p "$prefix.tmp/bin"
  for t in $tools; do cp "$work/build/bin/$t" "$prefix.tmp/bin/"; done
  echo "llama-cpp-python==$version vendor/llama.cpp" > "$prefix.tmp/SOURCE"
  echo "$stamp" > "$prefix.tmp/BUILD"
  rm -rf "$prefix"
  mv "$prefix.tmp" "$prefix"
  log "built: $prefix/bin"
else
  log "llama.cpp ok: $prefix/bin"
fi

[ "$binaries_only" = 1 ] && exit 0

# The tiny model's GGUF files, rebuilt when any is missing.
want="F16 Q8_0 Q4_K_M IQ4_XS UD-Q4_K_XL"
missing=0
for q in $want; do [ -s "$models/tiny-llama-$q.gguf" ] || missing=1; done
if [ "$missing" = 1 ]; then
  log "writing the tiny model's GGUF files at $models"
  rm -rf "$models.tmp" && mkdir -p "$models.tmp"
  m=$models.tmp
  "$root/.venv/bin/python" "$here/build_tiny_gguf.py" "$tiny" "$m/tiny-llama-F16.gguf" --calibration "$m/calibration.txt"
  # Run in the folder, with relative names: llama-quantize records the imatrix's file and dataset as given.
  cd "$m"
  q() { "$prefix/bin/llama-quantize" "$@" >>quantize.log 2>&1 || { tail -20 quantize.log >&2; exit 1; }; }
  q tiny-llama-F16.gguf tiny-llama-Q8_0.gguf Q8_0
  q tiny-llama-F16.gguf tiny-llama-Q4_K_M.gguf Q4_K_M
  "$prefix/bin/llama-imatrix" -m tiny-llama-F16.gguf -f calibration.txt -o imatrix.gguf \
    -c 128 --chunks 32 -t "$(nproc)" >imatrix.log 2>&1 || { tail -20 imatrix.log >&2; exit 1; }
  q --imatrix imatrix.gguf tiny-llama-F16.gguf tiny-llama-IQ4_XS.gguf IQ4_XS
  q --imatrix imatrix.gguf --tensor-type 'attn_[kv]=q8_0' --tensor-type 'blk\.0\.ffn_down=q8_0' \
    --token-embedding-type q8_0 tiny-llama-F16.gguf tiny-llama-UD-Q4_K_XL.gguf Q4_K_M
  cd "$root"
  rm -rf "$models"
  mv "$models.tmp" "$models"
else
  log "tiny GGUF files ok: $models"
fi
