#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz") and runs each one for N seconds (default 60).
#   scripts/fuzz.sh [seconds-per-target] [target...]      e.g. scripts/fuzz.sh 120 fuzz_safetensors
# Seeds: fuzz/seeds/<target>/ (committed), regenerated into fuzz-corpus/seeds/ when a python with
# the gguf, safetensors and numpy packages is found ($PYTHON, .venv, /tmp/venv, python3).
# Corpus growth goes to fuzz-corpus/<target>/ (git-ignored); crashes to fuzz-corpus/crashes/.
# Exits non-zero when any target finds a crash, leak, timeout or out-of-memory input, printing it.
# Env: JOBS (build parallelism, default 2), FUZZ_FLAGS (extra libFuzzer flags).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(fuzz_gguf fuzz_safetensors fuzz_hf_config)
jobs="${JOBS:-2}"
build="$root/build-fuzz"
corpus_root="$root/fuzz-corpus"

echo "== configure + build (preset fuzz, -j$jobs): ${targets[*]}"
cmake --preset fuzz >/dev/null || { echo "fuzz.sh: configure failed (is clang++ installed?)" >&2; exit 2; }
cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { echo "fuzz.sh: build failed" >&2; exit 2; }

# Fresh seeds from the python packages when available; the committed ones otherwise.
gen_seeds=""
for py in "${PYTHON:-}" "$root/.venv/bin/python" /tmp/venv/bin/python python3; do
  [[ -n "$py" ]] && command -v "$py" >/dev/null 2>&1 || continue
  if "$py" -c "import gguf, safetensors, numpy" >/dev/null 2>&1; then
    if "$py" fuzz/make_seeds.py "$corpus_root/seeds" >/dev/null; then
      gen_seeds="$corpus_root/seeds"
      echo "== seeds regenerated with $py"
    fi
    break
  fi
done
[[ -z "$gen_seeds" ]] && echo "== python gguf/safetensors not found: using the committed seeds only"

mkdir -p "$corpus_root/crashes"
status=0
summary=()
for t in "${targets[@]}"; do
  exe="$build/bin/$t"
  corpus="$corpus_root/$t"
  mkdir -p "$corpus"
  seed_dirs=()
  [[ -d "fuzz/seeds/$t" ]] && seed_dirs+=("fuzz/seeds/$t")
  [[ -n "$gen_seeds" && -d "$gen_seeds/$t" ]] && seed_dirs+=("$gen_seeds/$t")
  dict=()
  [[ -f "fuzz/dicts/$t.dict" ]] && dict=(-dict="fuzz/dicts/$t.dict")
  log="$corpus_root/$t.log"
  echo "== $t: ${seconds}s (corpus $corpus, log $log)"
  touch "$log.start"
  # shellcheck disable=SC2086
  "$exe" "$corpus" "${seed_dirs[@]}" "${dict[@]}" -max_total_time="$seconds" -max_len=65536 \
      -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$corpus_root/crashes/$t-" ${FUZZ_FLAGS:-} >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  [[ -z "$runs" ]] && runs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')  # -fork mode
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1)
  size=$(find "$corpus" -type f | wc -l)
  line="$t: rc=$rc runs=${runs:-?} ${cov:-} ${ft:-} corpus=$size files"
  found=$(find "$corpus_root/crashes" -name "$t-*" -newer "$log.start" -type f 2>/dev/null | wc -l)
  [[ $found -gt 0 ]] && line="$line new-artifacts=$found"
  # With FUZZ_FLAGS="-fork=1 -ignore_crashes=1" libFuzzer goes on after a crash and exits 0.
  forked=$(grep -oE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' "$log" | tail -1 | grep -oE '[0-9/]+$')
  if [[ -n "$forked" && "$forked" != "0/0/0" ]]; then
    [[ $rc -eq 0 ]] && rc=1
    line="$line oom/timeout/crash=$forked"
  fi
  if [[ $rc -ne 0 ]]; then
    status=1
    crash=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //')
    line="$line  FINDING: ${crash:-see $log}"
    echo "---- $t failed (rc=$rc); end of log:"
    tail -n 60 "$log"
    if [[ -n "$crash" && -f "$crash" ]]; then
      echo "---- crash input $crash ($(stat -c %s "$crash") bytes), first 256 bytes:"
      head -c 256 "$crash" | od -A d -t x1z | head -n 20
      echo "---- reproduce: $exe $crash"
    fi
  fi
  echo "   $line"
  summary+=("$line")
done

echo "== summary"
printf '  %s\n' "${summary[@]}"
exit $status
