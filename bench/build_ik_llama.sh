#!/usr/bin/env bash
# Builds ik_llama.cpp's libllama.so (issue 6's second CPU peer, run by bench/ikllama_bench.py
# through its PyPI binding's ctypes API) from the pinned ik-llama-cpp-python source
# distribution (tools/requirements-ikllama.txt), without pip: the sdist's own install fails on
# git metadata it lacks. Nothing of it is copied into tachyon; it lands in .peers/ (ignored by
# git). Compile jobs at nice 19, JOBS=2 unless set: ~5 min on 2 cores. Prints the library's
# path; run the bench with
#   IK_LLAMA_CPP_LIB_PATH=<that path> PYTHONPATH=.peers/ik/src python3 bench/ikllama_bench.py
# (bench/compare_cpu_peers.py does this itself).
#
#   bench/build_ik_llama.sh          # native: .peers/ik/build-native
#   bench/build_ik_llama.sh avx2     # AVX2 + FMA + F16C only (no AVX-512, VNNI or AMX): the
#                                    # AVX2 rows (issue 21): .peers/ik/build-avx2
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
level="${1:-native}"
version="$(sed -n 's/^ik-llama-cpp-python==//p' "$root/tools/requirements-ikllama.txt")"
peers="$root/.peers/ik"
source_dir="$peers/src"  # the sdist, unpacked: the Python package and vendor/ik_llama.cpp
build="$peers/build-$level"
case "$level" in
  native) flags=(-DGGML_NATIVE=ON) ;;
  avx2)
    flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
           -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
    ;;
  *)
    echo "usage: $0 [native|avx2]" >&2
    exit 2
    ;;
esac
library="$build/src/libllama.so"
if [ -f "$library" ]; then
  echo "$library"
  exit 0
fi
mkdir -p "$peers"
if [ ! -d "$source_dir/vendor/ik_llama.cpp" ]; then
  python3 -m pip download --quiet --no-deps --no-binary :all: -d "$peers" \
    "ik-llama-cpp-python==$version"
  mkdir -p "$source_dir"
  tar xzf "$peers/ik_llama_cpp_python-$version.tar.gz" -C "$source_dir" --strip-components=1
fi
# Flash attention over an f16 cache is what the bench runs; the other KV types' kernels
# (GGML_IQK_FA_ALL_QUANTS) only lengthen the build.
cmake -S "$source_dir/vendor/ik_llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_IQK_FA_ALL_QUANTS=OFF "${flags[@]}" >/dev/null
nice -n 19 cmake --build "$build" --target llama -j "${JOBS:-2}" >&2
echo "$library"
