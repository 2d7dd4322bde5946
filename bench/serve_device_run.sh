#!/usr/bin/env bash
# On the GPU machine: build, the CUDA tests and the paged-cache unit tests, then bench/serve_load.py
# against `lithe serve --device cuda` on a Llama-2-7B-shaped synthetic model (random weights; the
# tokenizer and chat template of tests/data/tiny, SmolLM2's, whose vocabulary the model takes).
# Needs third_party/cpp-httplib (scripts/fetch_httplib.sh, carried: the GPU hosts have no package).
#   bash bench/serve_device_run.sh [tests|load] [DTYPE...]     (default: tests load int4-g128 f16)
source "$(dirname "$0")/device_common.sh"
what=${1:-all}
shift || true
dtypes=${*:-int4-g128 f16}
build_cuda
if [ "$what" != load ]; then
  log "cuda tests"
  $B/bin/lithe_cuda_tests 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" | tee "$OUT/cuda_tests.txt"
  $B/bin/lithe_unit_tests --gtest_filter='PagedCache*:KvPool*' 2>&1 | grep -E "OK|FAILED|PASSED|paged" | tee "$OUT/paged_tests.txt"
fi
[ "$what" = tests ] && exit 0
TOK=$(mktemp -d)
cp tests/data/tiny/llama3/config.json tests/data/tiny/llama3/model.safetensors tests/data/tiny/tokenizer/* "$TOK"/
for dt in $dtypes; do
  log "serve load, synthetic llama2-7b $dt"
  timeout 400 python3 bench/serve_load.py --lithe $L --model "$TOK" --deadline 300 \
    --server-args "--synthetic llama2-7b --dtype $dt --device cuda --kv-type f16 --max-batch 64" \
    --json "$OUT/serve_load_h100_$dt.json" 2>&1 | tail -30 | tee "$OUT/serve_load_h100_$dt.txt"
done
