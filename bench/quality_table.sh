#!/usr/bin/env bash
# Issue 6's quality table: the default model compressed every way the issue lists, each result's
# perplexity on the SOTU evaluation split (gptq protocol, ctx 2048). Resumable: a setting whose
# result file exists is skipped, so a run cut short (the GPU machine's 10-minute calls) goes on
# where it stopped. Prints the markdown table at the end.
#   bash bench/quality_table.sh [SETTING ...]      (default: every setting)
# Environment: LITHE (binary, default build/bin/lithe), OUTQ (work dir, default out/quality),
#   NSAMPLES / SEQLEN (calibration, default 128 x 2048), WINDOWS (evaluation windows, 0 = all),
#   EVAL_DEVICE (cpu or cuda), QDEVICE (device for the solvers), EXTRA (more quantize flags),
#   EVAL_EXTRA (more perplexity flags).
# On a GPU machine: LITHE=build-cuda/bin/lithe QDEVICE=cuda EVAL_DEVICE=cuda EXTRA=--dequantize
#   EVAL_EXTRA=--dequantize (f32 weights throughout, as on the cpu).
# gptq-w4g128-sink1 leaves each window's first token out of the Hessians (--sink-tokens 1).
set -uo pipefail
cd "$(dirname "$0")/.."
LITHE=${LITHE:-build/bin/lithe}
OUTQ=${OUTQ:-out/quality}
NSAMPLES=${NSAMPLES:-128}
SEQLEN=${SEQLEN:-2048}
WINDOWS=${WINDOWS:-0}
EVAL_DEVICE=${EVAL_DEVICE:-cpu}
QDEVICE=${QDEVICE:-cpu}
EXTRA=${EXTRA:-}
EVAL_EXTRA=${EVAL_EXTRA:-}
M=${MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
EVAL=data/sotu-eval.txt
mkdir -p "$OUTQ"

# name | quantize flags (empty: the dequantized baseline). g128 needs --partial-groups: the
# model's 576-wide inputs are 4.5 groups of 128 (the last group of those rows has 64 columns).
SETTINGS=(
  "baseline|"
  "rtn-w4|--method rtn --bits 4 --group 0"
  "gptq-w4|--method gptq --bits 4 --group 0"
  "gptq-w4-act|--method gptq --bits 4 --group 0 --act-order"
  "rtn-w4g128|--method rtn --bits 4 --group 128 --partial-groups"
  "gptq-w4g128|--method gptq --bits 4 --group 128 --partial-groups"
  "gptq-w4g128-sink1|--method gptq --bits 4 --group 128 --partial-groups --sink-tokens 1"
  "gptq-w4g128-act|--method gptq --bits 4 --group 128 --partial-groups --act-order"
  "rtn-w3|--method rtn --bits 3 --group 0"
  "gptq-w3|--method gptq --bits 3 --group 0"
  "gptq-w3-act|--method gptq --bits 3 --group 0 --act-order"
  "rtn-w3g128|--method rtn --bits 3 --group 128 --partial-groups"
  "gptq-w3g128|--method gptq --bits 3 --group 128 --partial-groups"
  "gptq-w3g128-act|--method gptq --bits 3 --group 128 --partial-groups --act-order"
  "rtn-w2g64|--method rtn --bits 2 --group 64"
  "gptq-w2g64|--method gptq --bits 2 --group 64"
  "gptq-w2g64-act|--method gptq --bits 2 --group 64 --act-order"
  "magnitude-50|--method magnitude --sparsity 0.5"
  "sparsegpt-50|--method sparsegpt --sparsity 0.5"
  "magnitude-4:8|--method magnitude --nm 4:8"
  "sparsegpt-4:8|--method sparsegpt --nm 4:8"
  "magnitude-2:4|--method magnitude --nm 2:4"
  "sparsegpt-2:4|--method sparsegpt --nm 2:4"
  "sparsegpt-50+w4g128|--method sparsegpt --sparsity 0.5 --quantize-sparse --bits 4 --group 128 --partial-groups"
)

NAMES=""
for s in "${SETTINGS[@]}"; do
  name=${s%%|*}
  flags=${s#*|}
  NAMES="$NAMES $name"
  [ $# -gt 0 ] && [[ " $* " != *" $name "* ]] && continue
  res="$OUTQ/$name.json"
  [ -s "$res" ] && continue
  if [ -n "$flags" ]; then
    ck="$OUTQ/ckpt-$name"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    "$LITHE" quantize -m "$M" -o "$ck" $flags --nsamples "$NSAMPLES" --seqlen "$SEQLEN" --device "$QDEVICE" \
      --force $EXTRA > "$OUTQ/$name.quantize.txt" 2>&1 || { echo "quantize $name failed:"; tail -5 "$OUTQ/$name.quantize.txt"; continue; }
    qsec=$(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))")
    model="$ck"
    deq=""
  else
    qsec=0
    model="$M"
    deq="--dequantize"
  fi
  # shellcheck disable=SC2086
  [[ " $EVAL_EXTRA " == *" --dequantize "* ]] && deq=""
  "$LITHE" perplexity -m "$model" $deq $EVAL_EXTRA -f "$EVAL" --protocol gptq --ctx 2048 --max-windows "$WINDOWS" \
    --device "$EVAL_DEVICE" --json > "$OUTQ/$name.ppl.json" 2> "$OUTQ/$name.ppl.err" ||
    { echo "perplexity $name failed:"; tail -5 "$OUTQ/$name.ppl.err"; continue; }
  python3 - "$OUTQ/$name.ppl.json" "$OUTQ/$name.quantize.txt" "$qsec" "$name" "$flags" > "$res" <<'EOF' || rm -f "$res"
import json, re, sys
p = json.load(open(sys.argv[1]))
rep = {"name": sys.argv[4], "flags": sys.argv[5], "quantize_seconds": float(sys.argv[3]),
       "perplexity": p["ppl"], "windows": p["windows"], "tokens": p.get("tokens")}
try:
    text = open(sys.argv[2]).read()
    m = re.search(r"([\d.]+) bits per weight", text); rep["bits_per_weight"] = float(m.group(1)) if m else None
    m = re.search(r"sparsity ([\d.]+)", text); rep["sparsity"] = float(m.group(1)) if m else None
    m = re.search(r"mean error ([\d.e+-]+)", text); rep["mean_error"] = float(m.group(1)) if m else None
except OSError:
    pass
print(json.dumps(rep))
EOF
  [ -s "$res" ] && echo "$name: $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('ppl', round(r['perplexity'], 3), 'quantize', r['quantize_seconds'], 's')" "$res")"
done

python3 - "$OUTQ" $NAMES <<'EOF'
import json, os, sys
d = sys.argv[1]
paths = [os.path.join(d, n + ".json") for n in sys.argv[2:]]
rows = [json.load(open(p)) for p in paths if os.path.isfile(p) and os.path.getsize(p) > 0]
if not rows:
    sys.exit(0)
print("\n| setting | perplexity | bits/weight | zeros | mean rel. error | quantize s | windows |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    f = lambda k, fmt: (fmt % r[k]) if r.get(k) is not None else ""
    print(f"| {r['name']} | {r['perplexity']:.3f} | {f('bits_per_weight', '%.3f')} | {f('sparsity', '%.3f')} | "
          f"{f('mean_error', '%.3e')} | {r['quantize_seconds']:.1f} | {r['windows']} |")
EOF
