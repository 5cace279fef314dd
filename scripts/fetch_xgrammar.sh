#!/usr/bin/env bash
# Fetches XGrammar's source once into .deps/xgrammar (the constrained-decoding layer builds its
# C++ core from it; no Python bindings). The PyPI source distribution carries cpp/, include/
# and 3rdparty/; it is pinned by version and checked by sha256. Our fixes to it are the patches
# in scripts/patches/xgrammar-*.patch (each says what it fixes), applied in name order; the
# source is fetched again when they change.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="0.2.9"
want_sha256="87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90"
url="https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$version.tar.gz"
target="$root/.deps/xgrammar"
patches=("$root"/scripts/patches/xgrammar-*.patch)
stamp="$version $(cat "${patches[@]}" | sha256sum | cut -d' ' -f1)"

if [ "$(cat "$target/.version" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi

mkdir -p "$root/.deps"
work="$(mktemp -d "$root/.deps/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "fetch_xgrammar: downloading xgrammar $version source (about 2.8 MB)"
curl --fail --silent --show-error --location --retry 3 -o "$work/xgrammar.tar.gz" "$url"
got_sha256="$(sha256sum "$work/xgrammar.tar.gz" | cut -d' ' -f1)"
if [ "$got_sha256" != "$want_sha256" ]; then
  echo "fetch_xgrammar: sha256 is $got_sha256, expected $want_sha256; not installing it" >&2
  exit 1
fi
tar -xzf "$work/xgrammar.tar.gz" -C "$work"
for patch_file in "${patches[@]}"; do
  patch --quiet --forward -p1 -d "$work/xgrammar-$version" < "$patch_file"
done
echo "$stamp" > "$work/xgrammar-$version/.version"
rm -rf "$target"
mv "$work/xgrammar-$version" "$target"
echo "fetch_xgrammar: installed $target"
