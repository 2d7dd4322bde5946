#!/usr/bin/env bash
# The GPU compression solvers on the GPU machine (issue 6; see bench/DEVICE_RUNS.md).
#   bash bench/compress_device_run.sh build   configure + build (cuda-release), then the GPU solver and
#                                             pipeline tests (CudaCompress*, CudaPipeline*) and the CPU
#                                             compression unit tests
#   bash bench/compress_device_run.sh time [N] GPTQ 4-bit g128 of a synthetic Llama-2-7B (f16) on 128 x 2048
#                                             random token ids, whole pipeline on the GPU (target <= 600 s
#                                             on an H100); first 2 layers alone, then N (default all 32)
#   bash bench/compress_device_run.sh model   the default model (models/part-0* or the .gguf): GPU vs CPU
#                                             pipeline test, `lithe quantize` on cuda and cpu, perplexity
# Logs go to $OUT (or out/device).
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
SEVEN_B="--synthetic llama2-7b --dtype f16 --device cuda --method gptq --bits 4 --group 128 --nsamples 128 --seqlen 2048"
case "${1:-}" in
  build)
    build_cuda
    log "GPU solver and pipeline tests"
    $B/bin/lithe_cuda_tests --gtest_filter='CudaCompress*:CudaPipeline*' 2>&1 | tee "$OUT/compress_tests.txt" |
      grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|Expected|Which is|differ|H \[|max \||error cpu|perplexity" | head -80
    log "CPU compression unit tests"
    $B/bin/lithe_unit_tests --gtest_filter='QuantGrid*:Rtn*:Gptq*:SparseGpt*:Magnitude*:ReconstructionError*:CpuSolverBackend*:SolverBackendFactory*:CalibrationWindows*:BlockForward*:CompressModel*' \
      2>&1 | tee "$OUT/compress_unit_tests.txt" | grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure" | head -20
    ;;
  time)
    log "lithe quantize $SEVEN_B --max-layers 2"
    $L quantize $SEVEN_B --max-layers 2 > "$OUT/quantize_7b_2layers.txt" 2>&1
    tail -4 "$OUT/quantize_7b_2layers.txt"
    LAYERS=""
    [ -n "${2:-}" ] && LAYERS="--max-layers $2"
    log "lithe quantize $SEVEN_B $LAYERS"
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 2000 > "$OUT/mem_7b.txt" 2>&1 &
    MON=$!
    ( time $L quantize $SEVEN_B $LAYERS ) > "$OUT/quantize_7b.txt" 2>&1
    kill $MON
    grep -E "blk\.(0|15|31)\.|^gptq on|nothing written|^real" "$OUT/quantize_7b.txt" | tail -30
    echo "peak GPU memory used (MiB): $(sort -n "$OUT/mem_7b.txt" | tail -1)"
    ;;
  model)
    assemble_model
    bash scripts/make-data.sh > /dev/null 2>&1 || echo "make-data failed"
    $B/bin/lithe_cuda_tests --gtest_filter='CudaPipeline.DefaultModel*' 2>&1 | tee "$OUT/compress_model_test.txt" |
      grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|SmolLM2|f16 weights" | head -30
    for dev in cuda cpu; do
      log "lithe quantize --device $dev (gptq 4-bit g64, 32 x 512 tokens)"
      ( time $L quantize -m $M -o out/smollm2-gptq4-$dev --method gptq --bits 4 --group 64 --device $dev --dequantize \
          --nsamples 32 --seqlen 512 --force ) > "$OUT/quantize_smollm2_$dev.txt" 2>&1
      grep -E "^gptq on|^wrote|^real" "$OUT/quantize_smollm2_$dev.txt"
      log "perplexity of the $dev-compressed model (20 windows)"
      $L perplexity -m out/smollm2-gptq4-$dev -f data/sotu-eval.txt --device cuda --max-windows 20 2>&1 | tail -2 |
        tee -a "$OUT/ppl_compressed.txt"
    done
    ;;
  *) echo "usage: $0 build|time [layers]|model"; exit 2 ;;
esac
