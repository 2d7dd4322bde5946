#!/usr/bin/env python3
"""Tokenizer encode throughput on one core over the SOTU corpus: lithe next to its peers, same run.

Peers: Hugging Face `tokenizers` (the model's own tokenizer configuration, rebuilt from the GGUF as in
tests/gen/gen_tokenizer_golden.py; single call per text, RAYON_NUM_THREADS=1) and, when a Python with
llama-cpp-python is given, llama.cpp's tokenizer (vocab_only). Every process is pinned to one CPU.
All three must produce the same number of tokens, or the numbers are not comparable and the script
fails. Unit: MB/s = 10^6 bytes of UTF-8 text per second; median of --reps repetitions (after one
warm-up) with min and max.

Usage:
  /tmp/venv-hf/bin/python bench/tokenizer_speed.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --sotu ../shared/data/corpora/sotu --bench build/bin/bench_tokenizer \\
      [--llama-python /tmp/venv-llama/bin/python] [--reps 5] [--out bench/RESULTS-tokenizer.md]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PEER_SCRIPT = r"""
import glob, json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[4])})
kind, model, sotu, cpu, reps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
texts = [open(f, encoding="utf-8").read() for f in sorted(glob.glob(os.path.join(sotu, "*.txt")))]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
if kind == "hf":
    sys.path.insert(0, sys.argv[6])
    import tokenizers, gen_tokenizer_golden as g
    tok = tokenizers.Tokenizer.from_str(json.dumps(g.reference_tokenizer_json(model)))
    encode = lambda t: tok.encode(t, add_special_tokens=False).ids
    version = "tokenizers " + tokenizers.__version__
else:
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    encode = lambda t: llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)
    version = "llama-cpp-python " + llama_cpp.__version__
mbs = []
tokens = 0
for r in range(reps + 1):
    t0 = time.perf_counter()
    tokens = sum(len(encode(t)) for t in texts)
    dt = time.perf_counter() - t0
    if r:
        mbs.append(nbytes / 1e6 / dt)
mbs.sort()
print(json.dumps({"version": version, "bytes": nbytes, "tokens": tokens, "reps": reps,
                  "encode_mb_s": {"median": mbs[len(mbs) // 2], "min": mbs[0], "max": mbs[-1]}}))
"""


def pin(cpu):
    return lambda: os.sched_setaffinity(0, {cpu})


def run_json(cmd, env=None, cpu=0):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pin(cpu), timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--sotu", default=str(ROOT.parent / "shared/data/corpora/sotu"))
    ap.add_argument("--bench", default=str(ROOT / "build/bin/bench_tokenizer"))
    ap.add_argument("--llama-python", default="/tmp/venv-llama/bin/python")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench/RESULTS-tokenizer.md"))
    a = ap.parse_args()

    rows = []
    lithe = run_json([a.bench, a.model, a.sotu, "--reps", str(a.reps), "--json"], cpu=a.cpu)
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
    except OSError:
        rev = ""
    rows.append(("lithe", f"0.1.0 ({rev or 'unknown revision'} + working tree)", lithe))
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    hf = run_json([sys.executable, "-c", PEER_SCRIPT, "hf", a.model, a.sotu, str(a.cpu), str(a.reps),
                   str(ROOT / "tests/gen")], env=env, cpu=a.cpu)
    rows.append(("Hugging Face", hf["version"], hf))
    if a.llama_python and os.path.exists(a.llama_python):
        ll = run_json([a.llama_python, "-c", PEER_SCRIPT, "llama", a.model, a.sotu, str(a.cpu), str(a.reps)],
                      cpu=a.cpu)
        rows.append(("llama.cpp", ll["version"], ll))
    for name, _, r in rows:
        if r["tokens"] != lithe["tokens"]:
            raise SystemExit(f"{name} made {r['tokens']} tokens, lithe {lithe['tokens']}: not comparable")

    date = datetime.date.today().isoformat()
    load = os.getloadavg()
    lines = [
        "# Tokenizer encode throughput",
        "",
        f"{date}, {cpu_name()}, {os.cpu_count()} CPUs (one used: every process pinned to CPU {a.cpu}), "
        f"{platform.system()} {platform.release()}.",
        f"Model: {Path(a.model).name} (byte-level BPE, pre-tokenizer smollm, 49152 tokens). "
        f"Text: the SOTU corpus, {lithe['bytes'] / 1e6:.2f} MB in {lithe['files']} addresses, "
        f"each encoded as one text; {lithe['tokens']} tokens, identical for every implementation.",
        f"MB/s = 10^6 bytes of UTF-8 per second; median of {a.reps} repetitions after a warm-up, (min-max).",
        f"Load average during the run: {load[0]:.1f} (the machine was shared; ratios between rows are more "
        "telling than the absolute numbers). Made by `bench/tokenizer_speed.py`.",
        "",
        "| implementation | version | encode MB/s | vs Hugging Face |",
        "|---|---|---|---|",
    ]
    base = hf["encode_mb_s"]["median"]
    for name, version, r in rows:
        e = r["encode_mb_s"]
        lines.append(f"| {name} | {version} | {e['median']:.2f} ({e['min']:.2f}-{e['max']:.2f}) | "
                     f"{e['median'] / base:.1f}x |")
    d = lithe["decode_mb_s"]
    lines += ["", f"lithe decode: {d['median']:.1f} MB/s ({d['min']:.1f}-{d['max']:.1f}).", ""]
    Path(a.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
