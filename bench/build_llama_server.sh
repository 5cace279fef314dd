#!/usr/bin/env bash
# Builds llama.cpp's own tools, llama-server (the peer of bench/compare_http.py) and llama-bench,
# from the llama.cpp that llama-cpp-python's PyPI source distribution vendors (the version pinned
# in tools/requirements-llamacpp.txt). Nothing of it is copied into tachyon; it lands in .peers/
# (ignored by git). One compile job at nice 19 unless JOBS=N: ~25 min on 2 cores.
#
#   bench/build_llama_server.sh          # native: .peers/llama-server/build/bin/llama-{server,bench}
#   bench/build_llama_server.sh avx2     # AVX2 + FMA + F16C only (no AVX-512, VNNI or AMX), for
#                                        # the AVX2 rows: .peers/llama-avx2/build/bin/...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
level="${1:-native}"
version="$(sed -n 's/^llama-cpp-python==//p' "$root/tools/requirements-llamacpp.txt")"
source_dir="$root/.peers/llama-server"  # the sdist and its source, shared by both builds
case "$level" in
  native)
    build="$source_dir/build"
    # No AMX: its path crashes on some Xeons.
    flags=(-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
    ;;
  avx2)
    build="$root/.peers/llama-avx2/build"
    flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
           -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF
           -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
           -DGGML_AMX_BF16=OFF)
    ;;
  *)
    echo "usage: $0 [native|avx2]" >&2
    exit 2
    ;;
esac
if [ -x "$build/bin/llama-server" ] && [ -x "$build/bin/llama-bench" ]; then
  echo "$build/bin/llama-server"
  exit 0
fi
mkdir -p "$source_dir"
if [ ! -d "$source_dir/src" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$source_dir" \
    "llama-cpp-python==$version"
  mkdir -p "$source_dir/src"
  tar xzf "$source_dir/llama_cpp_python-$version.tar.gz" -C "$source_dir/src" --strip-components=1
fi
# No web UI (it would be fetched from the network).
cmake -S "$source_dir/src/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "${flags[@]}" >/dev/null
nice -n 19 cmake --build "$build" --target llama-server llama-bench -j "${JOBS:-1}" >&2
echo "$build/bin/llama-server"
