#!/usr/bin/env bash
# StreamingLLM on the CPU (issue 9): streaming perplexity of sink+window vs window-only vs
# recompute on the default model over data/sotu-eval.txt (SOTU addresses 1980-2021 in year order,
# ~340k tokens), and per-token latency of sink vs recompute. Results: bench/RESULTS.md.
#   bench/streaming_cpu.sh quality   sinks 0/1/2/4/8 at window 1020 and 508 (first $PREFIX tokens)
#   bench/streaming_cpu.sh recompute recompute at window W_RC on the first $RC_PREFIX tokens, with
#                                     sink (4) and window-only on the same tokens
#   bench/streaming_cpu.sh latency   ms/token with the span full, sink vs recompute, W = 256..2048
#   bench/streaming_cpu.sh long      sink (4) and window-only over the whole text (~35 min each)
# Env: LITHE (binary), MODEL, TEXT, OUT (folder for JSON, plots, logs), PREFIX, RC_PREFIX, W_RC.
set -euo pipefail
cd "$(dirname "$0")/.."
LITHE=${LITHE:-build/bin/lithe}
MODEL=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
TEXT=${TEXT:-data/sotu-eval.txt}
OUT=${OUT:-out/streaming}
PREFIX=${PREFIX:-4000}
RC_PREFIX=${RC_PREFIX:-1000}
W_RC=${W_RC:-508}
[ -f "$TEXT" ] || bash scripts/make-data.sh
mkdir -p "$OUT"
ppl() { "$LITHE" perplexity --stream -m "$MODEL" -f "$TEXT" "$@"; }
# One line per run of a --json result: cache, sinks, window, tokens, ppl, ms/token (span full).
table() { python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print("| {cache} | {sinks} | {window} | {tokens} | {ppl:.3f} | {ms_per_token_full:.1f} |".format(**r))
' "$1"; }

case "${1:-quality}" in
  quality)
    for w in 1020 508; do
      ppl --cache window --window $w --max-tokens "$PREFIX" --segment 1000 --json > "$OUT/q-w$w-s0.json"
      table "$OUT/q-w$w-s0.json"
      for s in 1 2 4 8; do
        ppl --cache sink --sinks $s --window $w --max-tokens "$PREFIX" --segment 1000 --json > "$OUT/q-w$w-s$s.json"
        table "$OUT/q-w$w-s$s.json"
      done
    done ;;
  recompute)
    ppl --cache window,sink,recompute --sinks 4 --window "$W_RC" --max-tokens "$RC_PREFIX" --segment 250 \
      --plot "$OUT/recompute-w$W_RC.png" --json > "$OUT/recompute-w$W_RC.json"
    table "$OUT/recompute-w$W_RC.json" ;;
  latency)
    for w in 256 512 1024 2048; do
      ppl --cache sink --sinks 4 --window $w --max-tokens $((w + 300)) --json > "$OUT/lat-sink-w$w.json"
      table "$OUT/lat-sink-w$w.json"
      ppl --cache recompute --window $w --max-tokens $((w + 8)) --json > "$OUT/lat-recompute-w$w.json"
      table "$OUT/lat-recompute-w$w.json"
    done ;;
  long)
    ppl --cache sink,window --sinks 4 --window 1020 --plot "$OUT/long.png" --json > "$OUT/long.json"
    table "$OUT/long.json" ;;
  *) echo "usage: $0 quality|recompute|latency|long" >&2; exit 2 ;;
esac
