#!/usr/bin/env bash
# Runs a test command with the CPU kernels forced to LEVEL (TACHYON_CPU_LEVEL), so that the
# levels below this machine's best are tested too (ctest runs each test at the best level
# already). Exits 77 (ctest's SKIP_RETURN_CODE) when the CPU lacks LEVEL, or when LEVEL is the
# best it has (the plain run covers it; avx512 runs where AMX tiles make amx the best).
#   tests/run_at_level.sh avx2 build/tests/kernels/attention_test
set -euo pipefail
level="$1"
shift
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for flag in "$@"; do [[ "$flags" == *" $flag "* ]] || return 1; done; }
avx2=(avx2 fma f16c)
avx512=(avx512f avx512bw avx512vl avx512_vnni)
amx=(amx_tile amx_int8)
case "$level" in
  portable) ;;
  avx2)
    has "${avx2[@]}" || { echo "skip: this CPU lacks ${avx2[*]}"; exit 77; }
    has "${avx512[@]}" || { echo "skip: avx2 is this CPU's best level (the plain run)"; exit 77; }
    ;;
  avx512)
    has "${avx512[@]}" || { echo "skip: this CPU lacks ${avx512[*]}"; exit 77; }
    has "${amx[@]}" || { echo "skip: avx512 is this CPU's best level (the plain run)"; exit 77; }
    ;;
  *)
    echo "run_at_level.sh: unknown level '$level' (portable, avx2, avx512)" >&2
    exit 2
    ;;
esac
TACHYON_CPU_LEVEL="$level" exec "$@"
