#!/usr/bin/env bash
# On the GPU machine: build, the CUDA tests and the paged-cache unit tests, then bench/serve_load.py
# against `lithe serve --device cuda` on a Llama-2-7B-shaped synthetic model (random weights; the
# tokenizer and chat template of tests/data/tiny, SmolLM2's, whose vocabulary the model takes).
# Needs third_party/cpp-httplib (scripts/fetch_httplib.sh, carried: the GPU hosts have no package).
#   bash bench/serve_device_run.sh [tests|load|sink] [DTYPE...]  (default: tests, load of int4-g128 and f16)
# sink: `serve --device cuda --ctx 256 --cache sink` must stream one request past its context.
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
if [ "$what" = sink ]; then
  log "serve --cache sink past the context (synthetic llama2-7b int4-g128)"
  python3 - "$L" "$TOK" <<'PY' 2>&1 | tee "$OUT/serve_sink.txt"
import json, subprocess, sys, urllib.request
p = subprocess.Popen([sys.argv[1], "serve", "-m", sys.argv[2], "--port", "0", "--synthetic", "llama2-7b", "--dtype",
                      "int4-g128", "--device", "cuda", "--kv-type", "f16", "--ctx", "256", "--cache", "sink",
                      "--sinks", "4"], stdout=subprocess.PIPE, text=True)
url = p.stdout.readline().split("listening on ")[1].split()[0]
body = {"model": "x", "prompt": "The history of the United States " * 20, "max_tokens": 600, "temperature": 0}
model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
body["model"] = model
req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
r = json.loads(urllib.request.urlopen(req, timeout=300).read())
p.terminate()
print("usage", r["usage"], "finish", r["choices"][0]["finish_reason"], "rc", p.wait(60))
u = r["usage"]
sys.exit(0 if u["prompt_tokens"] + u["completion_tokens"] > 256 and r["choices"][0]["finish_reason"] in ("length", "stop") else 1)
PY
  exit 0
fi
for dt in $dtypes; do
  log "serve load, synthetic llama2-7b $dt"
  timeout 400 python3 bench/serve_load.py --lithe $L --model "$TOK" --deadline 300 \
    --server-args "--synthetic llama2-7b --dtype $dt --device cuda --kv-type f16 --max-batch 64" \
    --json "$OUT/serve_load_h100_$dt.json" 2>&1 | tail -30 | tee "$OUT/serve_load_h100_$dt.txt"
done
