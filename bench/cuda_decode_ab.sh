#!/usr/bin/env bash
# Side-by-side decode timing of the CUDA backend's decode-step switches on the GPU machine:
#   bash bench/cuda_decode_ab.sh [ROUNDS [MODEL [SETTING ...]]]   (default 2 rounds, llama2-7b)
# A SETTING is a space-separated list of environment assignments ("-" = none). Each round runs
# `lithe bench --synthetic MODEL -p 0 -n 128 -d 512 -r 5 --device cuda --kv-type f16` once per
# setting, alternating, and prints the median tg tok/s of each run. Default settings: the
# rope_kv epilogue (LITHE_QKV_ROPE) on and off, and programmatic dependent launch (LITHE_PDL) on.
# Needs build-cuda (bench/cuda_device_run.sh build).
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
rounds=${1:-2}
model=${2:-llama2-7b}
shift $(( $# < 2 ? $# : 2 ))
[ $# -gt 0 ] || set -- "-" "LITHE_QKV_ROPE=0" "LITHE_PDL=1"
for r in $(seq "$rounds"); do
  for setting in "$@"; do
    envs=()
    [ "$setting" = "-" ] || read -ra envs <<< "$setting"
    j=$(env "${envs[@]}" $L bench --synthetic "$model" -p 0 -n 128 -d 512 -r 5 --device cuda --kv-type f16 \
        --json 2> "$OUT/ab.err") || { tail -5 "$OUT/ab.err"; exit 1; }
    echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('round $r [$setting] tg', round(j['gen_tokens_per_second']['median'],1), 'GB/s', round(j['decode_gb_per_second'],1))"
  done
done
