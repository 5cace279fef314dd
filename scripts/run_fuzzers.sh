#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, from the seed corpus in
# fuzz/seeds/<target>/ plus a working corpus kept in fuzz/corpus-<target>/ between runs.
# JOBS targets run at once (default: the number of cores); each fuzzer is one process on one
# core, so one at a time left the other cores idle.
#
#   scripts/run_fuzzers.sh BUILD_DIR SECONDS [JOBS]
set -euo pipefail
build_dir="$1"
seconds="$2"
jobs="${3:-$(nproc)}"
root="$(cd "$(dirname "$0")/.." && pwd)"

# One target; its log stays in BUILD_DIR/<target>.log. Prints one line (or the log's tail on a
# failure, to stderr) and returns the fuzzer's status.
run_one() {
  local fuzzer="$1" name corpus seeds
  name="$(basename "$fuzzer")"
  corpus="$root/fuzz/corpus-$name"
  seeds="$root/fuzz/seeds/$name"
  mkdir -p "$corpus"
  if ! "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=0 -artifact_prefix="$root/fuzz/" "$corpus" "$seeds" \
      2> "$build_dir/$name.log"; then
    echo "fuzz: $name FAILED; its log:" >&2
    tail -n 60 "$build_dir/$name.log" >&2
    return 1
  fi
  echo "fuzz: $name ${seconds}s: $(grep -E '^#[0-9]+.*DONE|Done [0-9]+ runs' \
    "$build_dir/$name.log" | tail -n 1 || true)"
}

status=0
running=0
for fuzzer in "$build_dir"/fuzz/fuzz_*; do
  [ -x "$fuzzer" ] || continue
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_one "$fuzzer" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
