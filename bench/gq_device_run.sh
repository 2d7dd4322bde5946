#!/usr/bin/env bash
# Compressed-weight (gq) kernels on the GPU machine (issue 7; see bench/DEVICE_RUNS.md):
#   bash bench/gq_device_run.sh build     configure + build (cuda-release), then the gq kernel tests
#   bash bench/gq_device_run.sh kernels   per-layer speed: Marlin-class int4 GEMM and the GEMV
#                                         kernels against cuBLAS f16 / lithe's f16 matvec
#   bash bench/gq_device_run.sh e2e       Llama-2-7B-shaped decode (tg128 at depth 512) and
#                                         prefill (pp2048): f16 vs gq formats, alternated
#   bash bench/gq_device_run.sh cluster "VAR=V ..." ["VAR=V ..." ...]
#                                         the Marlin GEMM's cluster sums: Marlin tests with them on
#                                         and off (y hashes compared), then bench_cuda_qgemm
#                                         (BENCH_M, default 1,16,17,20,32,64,128; SPARSE=1 adds 2:4, ALL=1 the other shapes)
#                                         and Marlin-layout pp512 under each setting
#   bash bench/gq_device_run.sh gemv_cluster [ROUNDS]
#                                         the GEMV's cluster sums: GEMV and rope tests with them on
#                                         and off (outputs hashed and compared), then `knob` on / off
#   bash bench/gq_device_run.sh gemv_norm [ROUNDS]
#                                         the same for the norm weights copied before the wait
#                                         (LITHE_GEMV_NORM_EARLY)
#   bash bench/gq_device_run.sh gemv_runs [ROUNDS]
#                                         the same for static group runs (LITHE_GEMV_STATIC_RUNS)
#   bash bench/gq_device_run.sh gemv_pass
#                                         the GEMV's staging passes at M = 16: tests with passes forced
#                                         and by default (outputs hashed and compared), then the single
#                                         matrices at m = 16 with and without them
#   bash bench/gq_device_run.sh attn_single [ROUNDS]
#                                         decode attention's single-block path for short contexts:
#                                         attention tests with it on and LITHE_ATTN_SINGLE=0 (outputs
#                                         hashed and compared), then `knob` on / off
#   bash bench/gq_device_run.sh attn_early [ROUNDS]
#                                         decode attention's first tile before *n_kv: attention tests
#                                         with it on and LITHE_ATTN_EARLY_ISSUE=0 (outputs hashed and
#                                         compared), bench_cuda_attention each way, then tg128 int4
#                                         g128 at depth 0 (alternated) and 512 each way
#   bash bench/gq_device_run.sh defer [ROUNDS]
#                                         deferred residual sums (o and down): GEMV, backend and
#                                         model tests with them on and LITHE_GEMV_DEFER=0, then
#                                         `knob` on / off and other formats / depths each way
#   bash bench/gq_device_run.sh sparse [ROUNDS]
#                                         2:4 sparse int4 in the GEMV (sparse tensor cores): GEMV and
#                                         backend tests, the int4 matrices and layer dense and 2:4
#                                         (m = 1, 8, 16), then e2e int4 g128 dense / 2:4 / 2:4 on the
#                                         Marlin layout (LITHE_GQ_KERNEL=marlin): tg128 at depth 0 and
#                                         512, pp512, alternated (ROUNDS, default 2)
#   bash bench/gq_device_run.sh ab [ROUNDS ["VAR=V ..." ...]]
#                                         this tree against a baseline, side by side: ab/ holds the
#                                         baseline's versions of the changed files (repository paths,
#                                         e.g. `git show HEAD~1:src/kernels/cuda/gq_gemv.cu >
#                                         ab/src/kernels/cuda/gq_gemv.cu`; untracked, so it travels);
#                                         both built at once (build_baseline), then e2e int4 g128
#                                         tg128 at depth 0 alternated (ROUNDS, default 2) and the int4
#                                         matrices and layer (m = 1, 8, 16) from each build, each
#                                         under every environment setting given (default: none)
#   bash bench/gq_device_run.sh knob ROUNDS "VAR=V ..." ["VAR=V ..." ...]
#                                         the same binary under each environment setting in
#                                         turn: e2e int4 g128 tg128 at depth 0 (alternated, ROUNDS
#                                         rounds), then the int4 matrices and layer (m = 1, 8, 16)
#   bash bench/gq_device_run.sh verify    after `build`-ing all targets: every CUDA test (the Marlin
#                                         ones again with LITHE_MARLIN_WGMMA=0), e2e tg128 at depth 0
#                                         (f16, int4 g128 with and without the GEMV's L2 prefetch,
#                                         int8, int3), pp512 on the Marlin layout with and without
#                                         wgmma, bench_cuda_qgemm (wgmma on / off) and the int4 GEMV
#   bash bench/gq_device_run.sh profile REGEX SKIP [REGEX SKIP ...]
#                                         ncu (speed of light, occupancy, warp states) on launch
#                                         SKIP of the kernels matching REGEX in bench_cuda_gq_gemv --quick
#                                         (ncu spells template arguments "(int)4, (bool)0": e.g.
#                                         'gemv_kernel<\(int\)4, \(bool\)0, \(int\)1, \(int\)2')
#   bash bench/gq_device_run.sh profile_qgemm SHAPE M [SHAPE M ...]
#                                         the same on the Marlin GEMM of bench_cuda_qgemm's row
#                                         (layer name containing SHAPE, batch M), after its warm-up
#   bash bench/gq_device_run.sh ppl       the default model's perplexity through every CUDA kernel
#                                         against its dequantized reference, each format
#                                         (tests/py/test_gq_runtime.py -k cuda; the model sent in
#                                         parts; where the image lacks pytest, `pip download pytest
#                                         -d .whl/pytest` here and carry .whl/pytest)
#   bash bench/gq_device_run.sh peer      PyTorch's int4 kernel (_weight_int4pack_mm, bench/torch_int4pack.py)
#                                         and cuBLAS f16 through torch, then lithe's GEMV (m = 1, 8, 16)
#                                         and Marlin GEMM (m = 1-128) on the same shapes, then torch again
#                                         (after building bench_cuda_gq_gemv and bench_cuda_qgemm)
#   bash bench/gq_device_run.sh survey [ROUNDS]
#                                         a new machine kind's state, after building lithe,
#                                         lithe_cuda_tests, bench_cuda_gq_gemv and bench_cuda_qgemm: the
#                                         GEMV / Marlin tests, e2e tg128 at depth 0 (f16, int4 g128, 2:4
#                                         int4 g128, int3 g128, int8; alternated, ROUNDS rounds), the
#                                         int4 matrices and layer (m = 1, 8, 16), then `peer`'s torch rows
# Logs go to $OUT (or out/device).
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
TESTS='Marlin*:GqGemv*:CudaGq*'
STALLS=$(printf 'smsp__average_warp_latency_issue_stalled_%s,' long_scoreboard barrier membar short_scoreboard wait \
  math_pipe_throttle mio_throttle lg_throttle drain no_instruction)smsp__inst_executed.sum
# same_bits KNOB HASH_ENV TAG FILTER LOG: the tests FILTER with KNOB=1 and KNOB=0 and their outputs
# hashed (HASH_ENV set; lines tagged TAG): fails unless some were printed and none differ.
same_bits() {
  local knob=$1 env=$2 tag=$3 filter=$4 log=$5
  for c in 1 0; do
    env "$knob=$c" "$env=1" $B/bin/lithe_cuda_tests --gtest_filter="$filter" > /tmp/sb$c.txt 2>&1
    echo "== $filter, $knob=$c" | tee -a "$log"; grep -E "^\[  (FAILED|PASSED) |Failure" /tmp/sb$c.txt | head | tee -a "$log"
    grep "$tag" /tmp/sb$c.txt > /tmp/hash$c.txt
  done
  local ndiff; ndiff=$(diff /tmp/hash1.txt /tmp/hash0.txt | grep -c '^<')
  echo "$tag: $(wc -l < /tmp/hash1.txt) outputs, $ndiff differ" | tee -a "$log"
  [ -s /tmp/hash1.txt ] && [ "$ndiff" = 0 ] || { echo "FAILED: $knob=1 must give the bits of $knob=0" | tee -a "$log"; return 1; }
}
# tg128 TAG BIN [VAR=V ...]: BIN's int4 g128 tg128 from an empty context under that environment,
# printed as "TAG int4-g128 tg128@0 N tok/s" (median of 5); DTYPE=d (set by the caller;
# lithe ignores it) times that dtype instead.
tg128() {
  local tag=$1 bin=$2 dt=${DTYPE:-int4-g128} j; shift 2
  j=$(env "$@" "$bin" bench --synthetic llama2-7b --dtype "$dt" -p 0 -n 128 -r 5 --device cuda --kv-type f16 \
      -d 0 --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; return 0; }
  echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('$tag $dt tg128@0', round(j['gen_tokens_per_second']['median'],1), 'tok/s')"
}
# gemv_rows FILE: the matrix and layer rows of a bench_cuda_gq_gemv table (not the f16 ones).
gemv_rows() { grep -E "^\| (4096|11008|14336|int4)" "$1" | grep -v "x f16" | cut -c1-100; }
case "${1:-}" in
  build)
    build_cuda
    $B/bin/lithe_cuda_tests --gtest_filter="$TESTS" 2>&1 | tee "$OUT/gq_tests.txt" |
      grep -E "^\[  (FAILED|PASSED) |^\[==========\]|Failure|error|Expected|Which is|rel" | head -80
    ;;
  kernels)
    $B/bin/bench_cuda_qgemm > "$OUT/qgemm.md" 2>&1; cat "$OUT/qgemm.md" | head -90
    $B/bin/bench_cuda_gq_gemv > "$OUT/gq_gemv.md" 2>&1; cat "$OUT/gq_gemv.md" | head -70
    ;;
  e2e)
    rounds=${2:-2}
    for r in $(seq "$rounds"); do
      for setting in "f16" "int4-g128" "int4-g128 LITHE_GQ_KERNEL=marlin" "int3-g128" "int2-g64" "int8"; do
        read -ra parts <<< "$setting"
        dtype=${parts[0]}
        envs=("${parts[@]:1}")
        j=$(env "${envs[@]}" $L bench --synthetic llama2-7b --dtype "$dtype" -p 0 -n 128 -d 512 -r 5 --device cuda \
            --kv-type f16 --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; continue; }
        echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('round $r [$setting] tg128@512', round(j['gen_tokens_per_second']['median'],1), 'tok/s, GB/s', round(j['decode_gb_per_second'],1))"
      done
    done
    for setting in "f16" "int4-g128" "int4-g128 LITHE_GQ_KERNEL=marlin" "int3-g128"; do
      read -ra parts <<< "$setting"
      j=$(env "${parts[@]:1}" $L bench --synthetic llama2-7b --dtype "${parts[0]}" -p 2048 --ubatch 2048 -n 0 -r 3 --device cuda --kv-type f16 \
          --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; continue; }
      echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('[$setting] pp2048', round(j['prompt_tokens_per_second']['median'],1), 'tok/s')"
    done
    ;;
  verify)
    set -o pipefail
    $B/bin/lithe_cuda_tests 2>&1 | tee "$OUT/cuda_tests.txt" | grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure" | head -20
    LITHE_MARLIN_WGMMA=0 $B/bin/lithe_cuda_tests --gtest_filter='Marlin*' 2>&1 | tee "$OUT/marlin_old_tests.txt" |
      grep -E "^\[  (FAILED|PASSED) |Failure" | head
    tg() {  # tg DTYPE [VAR=V ...]: tok/s, tg128 at depth 0
      local d=$1; shift
      env "$@" $L bench --synthetic llama2-7b --dtype "$d" -p 0 -n 128 -r 5 --device cuda --kv-type f16 -d 0 --json 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)['gen_tokens_per_second']['median'],1))"
    }
    for r in 1 2; do
      echo "round $r: int4-g128 $(tg int4-g128) | prefetch off $(tg int4-g128 LITHE_GEMV_PREFETCH=0) | f16 $(tg f16) | int8 $(tg int8) | int3-g128 $(tg int3-g128)"
    done
    for w in 1 0; do
      j=$(LITHE_GQ_KERNEL=marlin LITHE_MARLIN_WGMMA=$w $L bench --synthetic llama2-7b --dtype int4-g128 -p 512 --ubatch 512 -n 0 -r 3 \
          --device cuda --kv-type f16 --json 2>/dev/null)
      echo "marlin layout LITHE_MARLIN_WGMMA=$w pp512 $(echo "$j" | python3 -c "import json,sys; print(round(json.load(sys.stdin)['prompt_tokens_per_second']['median'],1))") tok/s"
    done
    for w in 1 0; do
      echo "== bench_cuda_qgemm LITHE_MARLIN_WGMMA=$w"
      LITHE_MARLIN_WGMMA=$w BENCH_M=1,16,32,64,128 $B/bin/bench_cuda_qgemm --quick $([ $w = 1 ] && echo --sparse) > "$OUT/qgemm_wgmma$w.md" 2>&1
      grep '^|' "$OUT/qgemm_wgmma$w.md" | cut -d'|' -f2,4,5,7,12,15,17 | grep -v -- "---"
    done
    BENCH_FORMAT=int4 $B/bin/bench_cuda_gq_gemv --quick > "$OUT/gq_gemv.md" 2>&1
    grep -E "^\| (4096|11008|14336|int4)" "$OUT/gq_gemv.md" | cut -c1-120
    ;;
  cluster)
    # The Marlin GEMM's cluster sums against its scratch sums (LITHE_MARLIN_CLUSTER=0), one binary:
    # Marlin tests both ways with y hashed (the bits must agree), the mma.sync kernels with
    # cluster sums too, then bench_cuda_qgemm and pp512 on the Marlin layout under each setting
    # (the device returns at most 8 files: test logs go to one).
    t="$OUT/marlin_tests.txt"; : > "$t"
    same_bits LITHE_MARLIN_CLUSTER LITHE_TEST_MARLIN_HASH "marlin hash" 'Marlin*' "$t" || exit 1
    LITHE_MARLIN_WGMMA=0 $B/bin/lithe_cuda_tests --gtest_filter='Marlin*' > /tmp/mm.txt 2>&1
    echo "== Marlin tests, LITHE_MARLIN_WGMMA=0" | tee -a "$t"; grep -E "^\[  (FAILED|PASSED) |Failure" /tmp/mm.txt | head | tee -a "$t"
    shift
    for setting in "$@"; do
      read -ra envs <<< "$setting"
      f="$OUT/qgemm_$(echo "$setting" | tr -c 'A-Za-z0-9\n' '_').md"
      env "${envs[@]}" BENCH_M=${BENCH_M:-1,16,17,20,32,64,128} $B/bin/bench_cuda_qgemm --quick ${SPARSE:+--sparse} ${ALL:+--all} > "$f" 2>&1
      j=$(env "${envs[@]}" LITHE_GQ_KERNEL=marlin $L bench --synthetic llama2-7b --dtype int4-g128 -p 512 --ubatch 512 -n 0 -r 3 \
          --device cuda --kv-type f16 --json 2>/dev/null)
      echo "marlin layout pp512 [$setting] $(echo "$j" | python3 -c "import json,sys; print(round(json.load(sys.stdin)['prompt_tokens_per_second']['median'],1))") tok/s" >> "$f"
    done
    # One line per layer and m: marlin us under each setting, then cuBLAS f16 us (of the first).
    echo "layer | m | marlin us: $* | cuBLAS us"
    python3 - "$OUT" "$@" <<'PY'
import re, sys
out, settings = sys.argv[1], sys.argv[2:]
rows, blas, pp = {}, {}, []
for k, st in enumerate(settings):
    for line in open(f"{out}/qgemm_" + re.sub(r"[^A-Za-z0-9\n]", "_", st) + ".md"):
        c = [x.strip() for x in line.split("|")]
        if len(c) > 12 and c[4].isdigit():  # | layer | format | n_in x n_out | m | MB | marlin us | ... | cuBLAS us (11)
            key = (c[1] + (" 2:4" if "2:4" in c[2] else ""), c[3], int(c[4]))
            rows.setdefault(key, [""] * len(settings))[k] = c[6]
            blas.setdefault(key, c[11])
        elif line.startswith("marlin layout"):
            pp.append(line.strip())
for key, v in rows.items():
    print(f"{key[0]} {key[1]} | {key[2]} | " + " | ".join(v) + f" | {blas[key]}")
print("\n".join(pp))
PY
    ;;
  gemv_cluster|gemv_norm|gemv_runs)
    # A GEMV knob on against off: the cluster sums against scratch sums (LITHE_GEMV_CLUSTER), the
    # norm weights copied before griddepcontrol.wait against read with x (LITHE_GEMV_NORM_EARLY),
    # static group runs against the general loop (LITHE_GEMV_STATIC_RUNS).
    # The GEMV and rope tests both ways, outputs hashed (the bits must agree), then `knob` with
    # ROUNDS (default 3).
    k=LITHE_GEMV_CLUSTER; [ "$1" = gemv_norm ] && k=LITHE_GEMV_NORM_EARLY; [ "$1" = gemv_runs ] && k=LITHE_GEMV_STATIC_RUNS
    same_bits $k LITHE_TEST_GEMV_HASH "gemv hash" 'CudaGqGemv*:CudaMatvecRope*' "$OUT/gemv_tests.txt" || exit 1
    bash "$0" knob "${2:-3}" $k=1 $k=0
    ;;
  gemv_pass)
    # The GEMV's staging passes at M = 16 (gq_gemv_grid.cuh: pass_of) against staging whole ranges
    # (LITHE_GEMV_PASS=100000, the previous plan): the GEMV and rope tests with passes forced on every
    # M = 16 launch (LITHE_GEMV_PASS=1: 8 chunks) and by default, outputs hashed (the bits must
    # agree); then every format's single matrices at m = 16 both ways, two rounds.
    same_bits LITHE_GEMV_PASS LITHE_TEST_GEMV_HASH "gemv hash" 'CudaGqGemv*:CudaMatvecRope*' "$OUT/gemv_tests.txt" || exit 1
    for r in 1 2; do
      for p in 0 100000; do
        LITHE_GEMV_PASS=$p BENCH_M=16 $B/bin/bench_cuda_gq_gemv --quick > "$OUT/pass${p}_$r.md" 2>&1
        echo "== round $r LITHE_GEMV_PASS=$p"; grep -E "^\| [0-9]" "$OUT/pass${p}_$r.md" | grep -v "x f16" | cut -c1-100
      done
    done
    ;;
  attn_single)
    # Short contexts finished by one block against the split + merge (LITHE_ATTN_SINGLE=0): the
    # decode attention tests both ways, outputs hashed (the bits must agree), then `knob`.
    same_bits LITHE_ATTN_SINGLE LITHE_TEST_ATTN_HASH "attn hash" 'CudaAttention.Decode*:CudaAttention.Scrambled*' "$OUT/attn_tests.txt" || exit 1
    bash "$0" knob "${2:-3}" LITHE_ATTN_SINGLE=1 LITHE_ATTN_SINGLE=0
    ;;
  attn_early)
    # Decode attention's first tile asked for before *n_kv (LITHE_ATTN_EARLY_ISSUE=0: after): the
    # attention tests both ways, outputs hashed (the bits must agree), bench_cuda_attention each way,
    # then tg128 int4 g128 at depth 0 (alternated, ROUNDS, default 2) and at depth 512. Builds:
    # lithe lithe_cuda_tests bench_cuda_attention.
    same_bits LITHE_ATTN_EARLY_ISSUE LITHE_TEST_ATTN_HASH "attn hash" 'CudaAttention*' "$OUT/attn_tests.txt" || exit 1
    for c in 1 0; do
      LITHE_ATTN_EARLY_ISSUE=$c $B/bin/bench_cuda_attention --quick > "$OUT/attn_bench$c.md" 2>&1 || echo "bench_cuda_attention failed"
      echo "== LITHE_ATTN_EARLY_ISSUE=$c"; grep -E "^\| [A-Z]" "$OUT/attn_bench$c.md"
    done
    for r in $(seq "${2:-2}"); do
      for c in 1 0; do tg128 "round $r [LITHE_ATTN_EARLY_ISSUE=$c]" $L LITHE_ATTN_EARLY_ISSUE=$c; done
    done
    for c in 1 0; do
      j=$(LITHE_ATTN_EARLY_ISSUE=$c $L bench --synthetic llama2-7b --dtype int4-g128 -p 0 -n 128 -r 5 --device cuda \
          --kv-type f16 -d 512 --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; continue; }
      echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('[LITHE_ATTN_EARLY_ISSUE=$c] int4-g128 tg128@512', round(j['gen_tokens_per_second']['median'],1), 'tok/s')"
    done
    ;;
  defer)
    # Deferred residual sums (cuda_gq.h: GemvResidual) against direct ones (LITHE_GEMV_DEFER=0): the
    # GEMV, backend and model tests both ways, `knob` on / off (ROUNDS, default 3), then tg128 after
    # 512 tokens (int4 g128) and from an empty context (int3 g128, int8, f16), each way, alternated.
    for c in 1 0; do
      LITHE_GEMV_DEFER=$c $B/bin/lithe_cuda_tests --gtest_filter='CudaGqGemv*:CudaMatvecRope*:CudaBackend*:CudaModel*' \
        > "$OUT/defer_tests$c.txt" 2>&1
      echo "== tests, LITHE_GEMV_DEFER=$c"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/defer_tests$c.txt" | head
    done
    bash "$0" knob "${2:-3}" LITHE_GEMV_DEFER=1 LITHE_GEMV_DEFER=0
    for setting in "int4-g128 512" "int3-g128 0" "int8 0" "f16 0"; do
      read -r dtype depth <<< "$setting"
      for c in 1 0; do
        j=$(LITHE_GEMV_DEFER=$c $L bench --synthetic llama2-7b --dtype "$dtype" -p 0 -n 128 -r 5 --device cuda \
            --kv-type f16 -d "$depth" --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; continue; }
        echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('[LITHE_GEMV_DEFER=$c] $dtype tg128@$depth', round(j['gen_tokens_per_second']['median'],1), 'tok/s')"
      done
    done
    ;;
  sparse)
    $B/bin/lithe_cuda_tests --gtest_filter='CudaGqGemv*:CudaBackend*' > "$OUT/sparse_tests.txt" 2>&1
    echo "== tests"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/sparse_tests.txt" | head -20
    BENCH_FORMAT=int4 BENCH_M=1,8,16 $B/bin/bench_cuda_gq_gemv --quick > "$OUT/sparse_gemv.md" 2>&1
    grep -E "^\| (4096|11008|14336|int4)" "$OUT/sparse_gemv.md" | grep -v "x f16" | cut -c1-120
    # e2e: "dtype depth kernel [VAR=V]": tg128 at that depth (depth "pp": pp512 instead)
    for r in $(seq "${2:-2}"); do
      for setting in "int4-g128 0 gemv" "int4-g128-2:4 0 gemv" "int4-g128-2:4 0 gemv LITHE_GEMV_PREFETCH=0" \
                     "int4-g128-2:4 0 marlin" "int4-g128 512 gemv" "int4-g128-2:4 512 gemv" "int4-g128 pp gemv" \
                     "int4-g128-2:4 pp gemv"; do
        read -r dtype depth kern extra <<< "$setting"
        if [ "$depth" = pp ]; then args=(-p 512 -n 1); key=prompt_tokens_per_second; else
          args=(-p 0 -n 128 -d "$depth"); key=gen_tokens_per_second; fi
        j=$(env LITHE_GQ_KERNEL=$kern $extra $L bench --synthetic llama2-7b --dtype "$dtype" "${args[@]}" -r 5 \
            --device cuda --kv-type f16 --json 2> "$OUT/e2e.err") || { tail -5 "$OUT/e2e.err"; continue; }
        echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); print('round $r [$kern $extra] $dtype ${args[*]}', round(j['$key']['median'],1), 'tok/s')"
      done
    done
    ;;
  ppl)
    assemble_model; bash scripts/make-data.sh
    python3 -c 'import pytest' 2>/dev/null || python3 -m pip install -q --no-index --find-links .whl/pytest pytest
    LITHE_TEST_CUDA=1 LITHE_BIN=$L python3 -m pytest -q -s -k cuda tests/py/test_gq_runtime.py > "$OUT/ppl.txt" 2>&1
    grep -E "^ppl |passed|failed|Error" "$OUT/ppl.txt" | tail -60
    ;;
  peer)
    python3 bench/torch_int4pack.py --json "$OUT/torch_int4pack.json" 2>&1 | tee "$OUT/torch_int4pack.md"
    BENCH_FORMAT=int4 BENCH_M=1,8,16 $B/bin/bench_cuda_gq_gemv --quick > "$OUT/gemv.md" 2>&1
    grep -E "^\| (4096|11008|14336)" "$OUT/gemv.md" | grep -v "x f16" | cut -c1-140
    BENCH_M=1,8,16,32,64,128 $B/bin/bench_cuda_qgemm --quick --all > "$OUT/qgemm.md" 2>&1
    grep -E "^\| [a-z]" "$OUT/qgemm.md" | grep -v "^| layer" | cut -c1-160 | head -60
    python3 bench/torch_int4pack.py --m 1,16,128 2>&1 | tee "$OUT/torch_int4pack_2.md"
    ;;
  ab)
    [ -d ab ] || { echo "ab/ (the baseline's files) is missing"; exit 2; }
    build_baseline ab lithe bench_cuda_gq_gemv > "$OUT/base.txt" 2>&1 &
    build_cuda lithe bench_cuda_gq_gemv; wait; cat "$OUT/base.txt"
    BB=/tmp/base/$B/bin
    [ -x $BB/lithe ] || exit 1
    rounds=${2:-2}; shift 2 2>/dev/null || shift
    [ $# -gt 0 ] || set -- "LITHE_AB=1"  # no setting given: each binary as it is
    for r in $(seq "$rounds"); do
      for setting in "$@"; do
        read -ra envs <<< "$setting"
        for bin in $BB/lithe $L; do tg128 "round $r [$bin $setting]" $bin "${envs[@]}"; done
      done
    done
    for setting in "$@"; do
      read -ra envs <<< "$setting"
      for bin in $BB/bench_cuda_gq_gemv $B/bin/bench_cuda_gq_gemv; do
        env "${envs[@]}" BENCH_FORMAT=int4 BENCH_M=1,8,16 $bin --quick > "$OUT/ab_gemv.md" 2>&1
        echo "== $bin $setting"; gemv_rows "$OUT/ab_gemv.md"
      done
    done
    ;;
  knob)
    rounds=$2; shift 2
    for r in $(seq "$rounds"); do
      for setting in "$@"; do
        read -ra envs <<< "$setting"
        tg128 "round $r [$setting]" $L "${envs[@]}"
      done
    done
    for setting in "$@"; do
      read -ra envs <<< "$setting"
      f="$OUT/gemv_$(echo "$setting" | tr -c 'A-Za-z0-9\n' '_').md"
      env "${envs[@]}" BENCH_FORMAT=int4 BENCH_M=1,8,16 $B/bin/bench_cuda_gq_gemv --quick > "$f" 2>&1
      echo "== $setting"; gemv_rows "$f"
    done
    ;;
  profile)
    shift
    while [ $# -ge 2 ]; do
      ncu --kernel-name-base demangled --kernel-name "regex:$1" --launch-skip "$2" --launch-count 1 \
          --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
          --section MemoryWorkloadAnalysis --section SchedulerStats --metrics "$STALLS" \
          $B/bin/bench_cuda_gq_gemv --quick > "$OUT/ncu_$2.txt" 2>&1
      grep -E "gemv_kernel|matvec_kernel|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occ|Registers Per|No Eligible|Warp Cycles Per Issued|Grid Size|Eligible Warps|Active Warps Per|Executed Ipc A|stall|Stall|inst_executed" "$OUT/ncu_$2.txt" | head -40
      shift 2
    done
    ;;
  profile_qgemm)
    shift
    while [ $# -ge 2 ]; do
      f="$OUT/ncu_qgemm_${1//\//_}_$2.txt"
      BENCH_SHAPE=$1 BENCH_M=$2 ncu --kernel-name-base demangled --kernel-name "regex:gemm_kernel" --launch-skip 3 \
          --launch-count 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
          --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
          --metrics "$STALLS" $B/bin/bench_cuda_qgemm --quick > "$f" 2>&1
      echo "== $1 m=$2"
      grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued|Grid Size|Cluster|Eligible Warps|Executed Ipc A|stall|inst_executed|Tensor|Pipe" "$f" | head -40
      shift 2
    done
    ;;
  survey)
    $B/bin/lithe_cuda_tests --gtest_filter='CudaGqGemv*:Marlin*' > "$OUT/survey_tests.txt" 2>&1
    echo "== tests"; grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure" "$OUT/survey_tests.txt" | head -20
    for r in $(seq "${2:-1}"); do
      for dtype in f16 int4-g128 int4-g128-2:4 int3-g128 int8; do DTYPE=$dtype tg128 "round $r" $L; done
    done
    BENCH_FORMAT=int4 BENCH_M=1,8,16 $B/bin/bench_cuda_gq_gemv --quick > "$OUT/survey_gemv.md" 2>&1
    grep -i -m2 "copy" "$OUT/survey_gemv.md"; grep -E "^\| (4096|11008|14336|int4)" "$OUT/survey_gemv.md" | cut -c1-150
    python3 bench/torch_int4pack.py --m 1,8,16,128 2>&1 | tee "$OUT/torch_int4pack.md" | tail -25
    ;;
  *) echo "usage: $0 survey|build|kernels|e2e|verify|cluster|gemv_cluster|gemv_norm|gemv_runs|attn_single|defer|sparse|ppl|peer|ab|knob|profile|profile_qgemm"; exit 2 ;;
esac
