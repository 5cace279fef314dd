#!/usr/bin/env bash
# Installs everything tachyon's build and tests need on Debian 12, then fetches the default
# model. Safe to run again: each step is skipped when already done.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

apt_packages=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-venv python3-pip
  clang libclang-rt-dev llvm
  libboost1.81-dev libboost-json1.81-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libssl-dev libsqlite3-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  unzip curl patch apache2-utils wrk
  redis-server libhiredis-dev postgresql libpq-dev
  openmpi-bin libopenmpi-dev iproute2
)

missing=()
for package in "${apt_packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd="sudo"; fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# Test-only Python packages (references we compare against) live in a venv inside the repo.
venv="$root/.venv"
requirements="$root/tools/requirements-test.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating Python venv at $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet -r "$requirements"
  echo "$want" > "$stamp"
fi

# XGrammar's C++ source for constrained decoding (src/structured).
"$root/scripts/fetch_xgrammar.sh"

"$root/scripts/fetch_model.sh"
# Gemma 3 270M: the sliding-window model the KV-memory tests and benchmarks run.
"$root/scripts/fetch_model.sh" gemma3
