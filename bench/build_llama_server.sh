#!/usr/bin/env bash
# Builds llama.cpp's own HTTP server (llama-server), the peer of bench/compare_http.py, from the
# llama.cpp that llama-cpp-python's PyPI source distribution vendors (the version pinned in
# tools/requirements-llamacpp.txt). Nothing of it is copied into tachyon; it lands in
# .peers/llama-server (ignored by git). One compile job at nice 19: ~20-30 min on 2 cores.
#
#   bench/build_llama_server.sh            # → .peers/llama-server/bin/llama-server
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(sed -n 's/^llama-cpp-python==//p' "$root/tools/requirements-llamacpp.txt")"
work="$root/.peers/llama-server"
binary="$work/build/bin/llama-server"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi
mkdir -p "$work"
if [ ! -d "$work/src" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$work" \
    "llama-cpp-python==$version"
  mkdir -p "$work/src"
  tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work/src" --strip-components=1
fi
# No web UI (it would be fetched from the network), no AMX (its path crashes on some Xeons).
cmake -S "$work/src/vendor/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
  -DGGML_AMX_BF16=OFF >/dev/null
nice -n 19 cmake --build "$work/build" --target llama-server -j "${JOBS:-1}" >&2
echo "$binary"
