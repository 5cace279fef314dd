#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR/fuzz for SECONDS each, from the seed corpus in
# fuzz/seeds/<target>/ plus a working corpus kept in fuzz/corpus-<target>/ between runs.
set -euo pipefail
build_dir="$1"
seconds="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
status=0
for fuzzer in "$build_dir"/fuzz/fuzz_*; do
  [ -x "$fuzzer" ] || continue
  name="$(basename "$fuzzer")"
  corpus="$root/fuzz/corpus-$name"
  seeds="$root/fuzz/seeds/$name"
  mkdir -p "$corpus"
  echo "fuzz: $name for ${seconds}s"
  if ! "$fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -print_final_stats=0 -artifact_prefix="$root/fuzz/" "$corpus" "$seeds" \
      2> "$build_dir/$name.log"; then
    echo "fuzz: $name FAILED; its log:" >&2
    tail -n 60 "$build_dir/$name.log" >&2
    status=1
  else
    grep -E '^#[0-9]+.*DONE|Done [0-9]+ runs' "$build_dir/$name.log" | tail -n 1 || true
  fi
done
exit $status
