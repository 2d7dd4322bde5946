#!/usr/bin/env bash
# The second README command: the whole test suite. C++ unit tests in the release build and
# again under ASan+UBSan, then the Python tests (golden comparisons against independent
# implementations, CLI end to end). Run scripts/setup.sh once first.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}

echo "== release build + unit tests"
cmake --preset release >/dev/null
cmake --build --preset release -j "$JOBS"
ctest --preset release -j "$JOBS"

echo "== ASan+UBSan build + unit tests"
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$JOBS" --target lithe_unit_tests
ctest --preset asan -j "$JOBS"

echo "== Python tests"
.venv/bin/python -m pytest -q tests/py
