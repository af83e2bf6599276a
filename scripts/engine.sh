#!/usr/bin/env bash
# Makes a real llama.cpp `llama-server` (CPU only) and a tiny random-weight
# GGUF model available to the test suite, with no model hub and no GitHub:
#
#   1. .cache/engine/venv          Python venv with gguf + tokenizers (PyPI, pinned)
#   2. .cache/engine/bin/llama-server
#        built from the llama.cpp tree vendored in the llama-cpp-python sdist
#        (PyPI, pinned version and sha256), llama/ggml linked in (needs only libc,
#        libstdc++, libgomp), GGML_NATIVE=OFF (x86-64 AVX2 baseline), no
#        OpenSSL/curl, no web UI (its prebuilt assets would be downloaded from a
#        model hub), compiled under `nice -n 19` with -j2.
#   3. .cache/engine/tiny.gguf     made by scripts/tiny_gguf.py (deterministic;
#                                  4 layers of width 128, 8k context, 4 MB)
#
# Idempotent: each step is skipped when its stamp matches what it would make,
# so a second run does nothing. The last line on stdout is the path of the
# llama-server binary; progress goes to stderr.
#
#   BIN=$(scripts/engine.sh | tail -n1)
#
# Environment: ENGINE_JOBS (default 2) parallel compile jobs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"

LLAMA_CPP_PYTHON_VERSION="0.3.36" # vendors ggml-org/llama.cpp@0c1e57098, gguf-py 0.19.0
LLAMA_CPP_COMMIT="0c1e57098"       # what `llama-server --version` reports
LLAMA_CPP_PYTHON_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
JOBS="${ENGINE_JOBS:-2}"

CACHE="$ROOT/.cache/engine"
VENV="$CACHE/venv"
BIN="$CACHE/bin/llama-server"
MODEL="$CACHE/tiny.gguf"
SDIST_DIR="$CACHE/sdist"
SRC="$CACHE/src"
BUILD="$CACHE/build"

# Everything the venv holds, pinned (gguf matches the vendored gguf-py).
PY_REQUIREMENTS="gguf==0.19.0
tokenizers==0.23.3
numpy==2.4.6
PyYAML==6.0.4
tqdm==4.70.1
requests==2.34.2
huggingface_hub==2.4.0"

CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=OFF
  -DGGML_CCACHE=OFF
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_NUMBER=0
  -DLLAMA_BUILD_COMMIT="$LLAMA_CPP_COMMIT"
)

log() { echo "engine: $*" >&2; }
mkdir -p "$CACHE"

# --- 1. the Python venv --------------------------------------------------------
venv_stamp="$VENV/.engine-stamp"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$venv_stamp" 2>/dev/null)" != "$PY_REQUIREMENTS" ]; then
  log "creating $VENV (gguf, tokenizers, numpy)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  printf '%s\n' "$PY_REQUIREMENTS" > "$CACHE/requirements.txt"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$CACHE/requirements.txt"
  printf '%s' "$PY_REQUIREMENTS" > "$venv_stamp"
fi

# --- 2. llama-server -----------------------------------------------------------
bin_key="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION ${CMAKE_FLAGS[*]}"
bin_stamp="$CACHE/bin/.engine-stamp"
if [ ! -x "$BIN" ] || [ "$(cat "$bin_stamp" 2>/dev/null)" != "$bin_key" ]; then
  sdist="$SDIST_DIR/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
  if [ ! -f "$sdist" ] || ! echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --status; then
    log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist (PyPI, ~77 MB)"
    rm -rf "$SDIST_DIR"
    mkdir -p "$SDIST_DIR"
    # `--no-binary llama-cpp-python`, not `:all:`: pip prepares the sdist's
    # metadata, and `:all:` would build its build backend (scikit-build-core)
    # and that backend's own build deps from source too, recursively (minutes
    # with a cold pip cache); this way they come as wheels and it takes seconds.
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-binary llama-cpp-python --no-deps \
      -d "$SDIST_DIR" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    echo "$LLAMA_CPP_PYTHON_SHA256  $sdist" | sha256sum -c --status \
      || { log "sha256 mismatch for $sdist"; exit 1; }
  fi

  log "unpacking vendor/llama.cpp"
  rm -rf "$SRC" "$BUILD"
  mkdir -p "$SRC"
  # The vendored tree only; its models/ (test vocabularies) and docs are not needed.
  tar -xzf "$sdist" -C "$SRC" --strip-components=3 \
    --exclude="*/vendor/llama.cpp/models" --exclude="*/vendor/llama.cpp/docs" \
    "llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  [ -f "$SRC/CMakeLists.txt" ] || { log "no vendor/llama.cpp in $sdist"; exit 1; }

  log "building llama-server (cmake, -j$JOBS, nice 19; ~5-7 min on 2 cores)"
  start=$(date +%s)
  # The sources sit inside this repo's work tree: keep llama.cpp's build-info
  # from picking up tokentap's git commit.
  export GIT_CEILING_DIRECTORIES="$CACHE"
  nice -n 19 cmake -S "$SRC" -B "$BUILD" "${CMAKE_FLAGS[@]}" -Wno-dev > "$CACHE/cmake-configure.log" 2>&1 \
    || { tail -n 40 "$CACHE/cmake-configure.log" >&2; exit 1; }
  nice -n 19 cmake --build "$BUILD" --target llama-server -j"$JOBS" > "$CACHE/cmake-build.log" 2>&1 \
    || { tail -n 40 "$CACHE/cmake-build.log" >&2; exit 1; }
  mkdir -p "$CACHE/bin"
  install -m 0755 "$BUILD/bin/llama-server" "$BIN"
  printf '%s' "$bin_key" > "$bin_stamp"
  log "llama-server built in $(( $(date +%s) - start )) s"
  # The static binary needs neither the sources nor the build tree.
  rm -rf "$SRC" "$BUILD"
fi

# --- 3. the tiny model ---------------------------------------------------------
# 4 layers of width 128 (4 MB): prefill ~20-40 us a token with one thread, so
# TTFT grows measurably with the prompt (the long-context and cache tests);
# an 8k context.
MODEL_FLAGS=(--n-embd 128 --n-layer 4 --n-ff 384 --n-ctx-train 8192)
model_key="$(sha256sum scripts/tiny_gguf.py | cut -d' ' -f1) ${MODEL_FLAGS[*]} $PY_REQUIREMENTS"
model_stamp="$CACHE/.tiny-gguf-stamp"
if [ ! -f "$MODEL" ] || [ "$(cat "$model_stamp" 2>/dev/null)" != "$model_key" ]; then
  log "writing $MODEL"
  "$VENV/bin/python" scripts/tiny_gguf.py "$MODEL" "${MODEL_FLAGS[@]}" >&2
  printf '%s' "$model_key" > "$model_stamp"
fi

log "model: $MODEL"
echo "$BIN"
