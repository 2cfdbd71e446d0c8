#!/usr/bin/env bash
# Build the real inference servers the tests under tests/realservers/ talk to, once, into a cache
# directory outside the repository:
#   $CACHE/bin/llama-server              llama.cpp's native server (from the llama-cpp-python sdist,
#                                        which vendors llama.cpp's full source)
#   $CACHE/llama-cpp-python-venv/        a venv with llama-cpp-python[server] (python -m llama_cpp.server)
# Idempotent: each part writes a stamp for its pinned version only after it succeeded, so a second
# run is a no-op in seconds and a failed build is retried next time (a failed build leaves no stamp).
# Usage: scripts/build_real_servers.sh [CACHE_DIR]
#   CACHE_DIR defaults to ${POWERSWEEP_REAL_SERVERS:-$HOME/.cache/powersweep/real-servers}.
#   PYTHON (default python3) builds the venv; POWERSWEEP_BUILD_JOBS (default 2) sets the parallelism.
# Needs: python3 (3.9+) with venv and pip, cmake >= 3.14, ninja, a C/C++ compiler, and access to
# PyPI (nothing else is downloaded: the llama.cpp web UI is built from nothing, not fetched).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
CACHE=${1:-${POWERSWEEP_REAL_SERVERS:-$HOME/.cache/powersweep/real-servers}}
PYTHON=${PYTHON:-python3}
JOBS=${POWERSWEEP_BUILD_JOBS:-2}

start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }
log() { echo "[build_real_servers $(elapsed)] $*"; }

for tool in "$PYTHON" cmake ninja c++; do
    command -v "$tool" >/dev/null || { echo "build_real_servers: '$tool' not found on PATH" >&2; exit 1; }
done

mkdir -p "$CACHE/stamps" "$CACHE/bin" "$CACHE/downloads"
CACHE=$(cd "$CACHE" && pwd)
native_stamp="$CACHE/stamps/llama-server-$LLAMA_CPP_PYTHON_VERSION"
python_stamp="$CACHE/stamps/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"
sdist="$CACHE/downloads/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"

fetch_sdist() {
    [ -f "$sdist" ] && return 0
    log "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION sdist"
    local tmp="$CACHE/downloads/tmp.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        --dest "$tmp" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    mv "$tmp"/llama_cpp_python-*.tar.gz "$sdist"
    rm -rf "$tmp"
}

build_native() {
    if [ -f "$native_stamp" ] && [ -x "$CACHE/bin/llama-server" ]; then
        log "llama-server $LLAMA_CPP_PYTHON_VERSION already built: $CACHE/bin/llama-server"
        return 0
    fi
    rm -f "$native_stamp"
    fetch_sdist
    # The work tree survives a failed build so that a retry compiles incrementally.
    local work="$CACHE/work/llama-server-$LLAMA_CPP_PYTHON_VERSION"
    local src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    if [ ! -d "$src/tools/server" ]; then
        rm -rf "$work" && mkdir -p "$work"
        tar -xzf "$sdist" -C "$work"
    fi
    log "configuring llama-server"
    # LLAMA_USE_PREBUILT_UI=OFF: by default the build downloads the web UI, and CI has no internet
    # beyond package registries. Static, no OpenSSL/tests/examples: one self-contained binary.
    cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        >"$work/configure.log" 2>&1 || { tail -n 40 "$work/configure.log" >&2; exit 1; }
    log "building llama-server (-j$JOBS, about 6 minutes on 2 cores)"
    cmake --build "$work/build" --target llama-server -j "$JOBS" >"$work/build.log" 2>&1 \
        || { tail -n 40 "$work/build.log" >&2; exit 1; }
    cp "$work/build/bin/llama-server" "$CACHE/bin/llama-server.tmp"
    mv -f "$CACHE/bin/llama-server.tmp" "$CACHE/bin/llama-server"
    "$CACHE/bin/llama-server" --version >/dev/null 2>&1 \
        || { echo "build_real_servers: the built llama-server does not run" >&2; exit 1; }
    touch "$native_stamp"
    rm -rf "$work" && rmdir "$CACHE/work" 2>/dev/null || true
    log "llama-server built: $CACHE/bin/llama-server"
}

build_python() {
    local venv="$CACHE/llama-cpp-python-venv"
    if [ -f "$python_stamp" ] && [ -x "$venv/bin/python" ]; then
        log "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already installed: $venv"
        return 0
    fi
    rm -f "$python_stamp"
    fetch_sdist
    # A half-installed venv from a failed run is thrown away rather than trusted.
    rm -rf "$venv"
    "$PYTHON" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    log "installing llama-cpp-python[server] $LLAMA_CPP_PYTHON_VERSION (about 5 minutes on 2 cores)"
    CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    CMAKE_ARGS="-DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
        "$venv/bin/python" -m pip install --quiet \
        "llama-cpp-python[server] @ file://$sdist" >"$CACHE/llama-cpp-python-install.log" 2>&1 \
        || { tail -n 40 "$CACHE/llama-cpp-python-install.log" >&2; exit 1; }
    "$venv/bin/python" -c "import llama_cpp.server.app" \
        || { echo "build_real_servers: llama_cpp.server does not import" >&2; exit 1; }
    touch "$python_stamp"
    log "llama-cpp-python installed: $venv"
}

build_native
build_python
log "done in $(elapsed) (cache: $CACHE)"
