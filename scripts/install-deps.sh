#!/usr/bin/env bash
# Installs everything lithe needs on Debian 12: compilers and libraries from Debian's packages,
# and a Python virtual environment (.venv) with the test and golden-file packages from PyPI.
# Safe to re-run. The CUDA toolkit is optional and not installed here (nvcc enables CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential g++-12 cmake ninja-build pkg-config git curl unzip ca-certificates
  nlohmann-json3-dev libcli11-dev libfmt-dev libopenblas-dev liblapack-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  libcpp-httplib-dev chromium
  python3 python3-venv python3-pip
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "== Debian packages: all present"
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import sys; sys.exit(0)" 2>/dev/null; then
  echo "error: .venv/bin/python does not run; delete .venv and re-run" >&2
  exit 1
fi
req_stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -f "$req_stamp" ] || [ "$(cat "$req_stamp")" != "$want" ]; then
  echo "== installing Python packages (requirements.txt)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" > "$req_stamp"
else
  echo "== Python packages: up to date"
fi
