#!/usr/bin/env bash
# For machines without Debian's libcpp-httplib-dev (the GPU hosts run another distribution and
# reach no network): fetches the same cpp-httplib release (0.11.4, MIT) as its single header from
# Debian's source archive into third_party/cpp-httplib/ (ignored by git). CMake builds `lithe
# serve` over that header (header-only mode, no TLS) when pkg-config finds no cpp-httplib.
# Run it here, then carry third_party/cpp-httplib to the other machine.
set -euo pipefail
cd "$(dirname "$0")/.."
url=http://deb.debian.org/debian/pool/main/c/cpp-httplib/cpp-httplib_0.11.4+ds.orig.tar.xz
sha=8b1a5df569003b6a4f24c68489bbda5c64aec94697bdc9ebba5d79408b2ae7eb
dst=third_party/cpp-httplib
[ -f $dst/httplib.h ] && { echo "$dst/httplib.h is there"; exit 0; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -sfL -o "$tmp/src.tar.xz" "$url"
echo "$sha  $tmp/src.tar.xz" | sha256sum -c --quiet
tar -xf "$tmp/src.tar.xz" -C "$tmp" --wildcards '*/httplib.h' '*/LICENSE'
mkdir -p $dst
cp "$tmp"/*/httplib.h "$tmp"/*/LICENSE $dst/
echo "fetched $dst/httplib.h (cpp-httplib 0.11.4, MIT: $dst/LICENSE)"
