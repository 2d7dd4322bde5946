#!/usr/bin/env bash
# The CUDA backend's build, tests and benchmarks on the GPU machine (see bench/DEVICE_RUNS.md).
#   bash bench/cuda_device_run.sh build     configure + build (cuda-release), kernel and backend tests
#   bash bench/cuda_device_run.sh synth     synthetic Llama shapes: lithe bench + PyTorch eager + matvec
#   bash bench/cuda_device_run.sh model     default model: GPU vs CPU tests, perplexity, generate, bench
# Logs go to $OUT (or out/device). The default model must be in models/ (sent in parts).
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
case "${1:-}" in
  build)
    build_cuda
    $B/bin/lithe_cuda_tests 2>&1 | tee "$OUT/cuda_tests.txt" | grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|error|Expected|Which is|worst|NMSE" | head -80
    ;;
  synth)
    $B/bin/bench_cuda_matvec > "$OUT/matvec.md" 2>&1; head -40 "$OUT/matvec.md"
    for args in "llama2-7b -p 512 -n 128 -d 512 -r 5" "llama2-7b -p 0 -n 128 -d 0 -r 5" \
                "llama2-7b -p 2048 --ubatch 2048 -n 0 -r 5" "llama2-7b --dtype bf16 -p 512 -n 128 -d 512 -r 3" \
                "llama3-8b -p 512 -n 128 -d 512 -r 3" "llama2-13b -p 512 -n 128 -d 512 -r 3"; do
      name=$(echo "$args" | tr ' ' '_' | tr -d '-')
      log "lithe bench --synthetic $args"
      $L bench --synthetic $args --device cuda --kv-type f16 --json > "$OUT/bench_$name.json" 2> "$OUT/bench_$name.err"
      python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['model'], j['dtype'], 'pp', round(j['prompt_tokens_per_second']['median'],1), 'tg', round(j['gen_tokens_per_second']['median'],1), 'GB/s', round(j['decode_gb_per_second'],1))" "$OUT/bench_$name.json" || tail -5 "$OUT/bench_$name.err"
    done
    log "PyTorch eager, llama2-7b f16"
    python3 bench/torch_synthetic.py --model llama2-7b -p 512 -n 64 -d 512 -r 3 --json "$OUT/torch_llama2-7b.json" > "$OUT/torch.txt" 2>&1
    tail -12 "$OUT/torch.txt"
    ;;
  model)
    assemble_model
    $B/bin/lithe_cuda_tests --gtest_filter='CudaModel*' 2>&1 | tee "$OUT/cuda_model_tests.txt" | grep -E "^\[  (FAILED|PASSED) |Failure|worst|Expected|Which" | head -40
    bash scripts/make-data.sh > /dev/null 2>&1 || echo "make-data failed"
    for dev in cpu cuda; do
      for dq in --dequantize ""; do
        log "perplexity $dev $dq"
        $L perplexity -m $M -f data/sotu-eval.txt --device $dev $dq --max-windows 20 --threads 16 2>&1 | tail -2 | tee -a "$OUT/ppl.txt"
      done
    done
    log "generate on cuda"
    $L generate -m $M --device cuda --temp 0 -n 48 -p "The three branches of the United States government are" 2>&1 | tail -4
    $L bench -m $M --device cuda -p 512 -n 128 -r 5 --json > "$OUT/bench_default_cuda.json" 2>&1
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('default cuda pp512', round(j['prompt_tokens_per_second']['median'],1), 'tg128', round(j['gen_tokens_per_second']['median'],1))" "$OUT/bench_default_cuda.json"
    ;;
  *) echo "usage: $0 build|synth|model"; exit 2 ;;
esac
