"""lithe vs llama.cpp on the CPU, side by side in one invocation: the same GGUF, the same thread
count, the same machine. Prompt processing (pp, one batch of P tokens) and generation (tg, N
single-token steps from an empty context), medians of R repetitions after a warm-up, alternating
the two engines each repetition so that machine noise hits both alike. Prints a table and the
ratios; --json writes them too.

    .venv/bin/python bench/cpu_vs_llamacpp.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
        --threads 2 --llama-python /tmp/venv-llama/bin/python
llama.cpp is llama-cpp-python from PyPI (built from source by pip), run in its own interpreter.

Compressed formats (issue 7): --lithe-model runs lithe on another file (a lithe int4 g128
checkpoint of the same model) while llama.cpp runs --model; --llama-quant q4_0 first requantizes
--model to that GGUF type with llama.cpp's own quantizer (written next to it, reused):
    .venv/bin/python bench/cpu_vs_llamacpp.py --lithe-model out/int4-g128 --llama-quant q4_0
"""
import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LLAMA_SNIPPET = r"""
import json, sys, time, random
import llama_cpp
from llama_cpp import Llama
model, threads, p, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = Llama(model_path=model, n_ctx=max(p, n) + 8, n_batch=max(p, 1), n_threads=threads, n_threads_batch=threads,
            verbose=False, logits_all=False)
random.seed(1)
prompt = [random.randrange(llm.n_vocab()) for _ in range(p)]
def pp():
    llm.reset(); t = time.perf_counter(); llm.eval(prompt); return p / (time.perf_counter() - t)
def tg():
    llm.reset(); tok = prompt[0] if prompt else 1; t = time.perf_counter()
    for _ in range(n):
        llm.eval([tok])
    return n / (time.perf_counter() - t)
pp(); tg()  # warm-up
print(json.dumps({"pp": pp(), "tg": tg(), "version": llama_cpp.__version__}))
"""


QUANTIZE_SNIPPET = r"""
import sys, llama_cpp
src, dst, ftype = sys.argv[1], sys.argv[2], getattr(llama_cpp, "LLAMA_FTYPE_MOSTLY_" + sys.argv[3].upper())
p = llama_cpp.llama_model_quantize_default_params()
p.ftype = ftype
p.allow_requantize = True
sys.exit(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), p))
"""


def llama_requantize(args):
    """--model requantized by llama.cpp to --llama-quant (cached next to --model)."""
    src = Path(args.model)
    dst = src.with_name(src.stem.split(".")[0] + f".{args.llama_quant.upper()}.gguf")
    if not dst.exists():
        subprocess.run([args.llama_python, "-c", QUANTIZE_SNIPPET, str(src), str(dst), args.llama_quant], check=True,
                       capture_output=True)
    return str(dst)


def lithe_once(args):
    cmd = [args.lithe, "bench", "-m", args.lithe_model or args.model, "-p", str(args.p), "-n", str(args.n), "-r", "1",
           "--threads", str(args.threads), "--json"]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return j["prompt_tokens_per_second"]["median"], j["gen_tokens_per_second"]["median"], j


def llama_once(args):
    out = subprocess.run([args.llama_python, "-c", LLAMA_SNIPPET, args.model, str(args.threads), str(args.p),
                          str(args.n)], check=True, capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["pp"], j["tg"], j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--llama-python", default="/tmp/venv-llama/bin/python")
    ap.add_argument("--lithe", default=str(ROOT / "build/bin/lithe"))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--lithe-model", help="the file lithe runs (default: --model)")
    ap.add_argument("--llama-quant", help="requantize --model for llama.cpp first (e.g. q4_0)")
    args = ap.parse_args()
    if args.llama_quant:
        args.model = llama_requantize(args)
    res = {"lithe": {"pp": [], "tg": []}, "llama.cpp": {"pp": [], "tg": []}}
    meta = {}
    for _ in range(args.r):
        for name, fn in (("lithe", lithe_once), ("llama.cpp", llama_once)):
            pp, tg, j = fn(args)
            res[name]["pp"].append(pp)
            res[name]["tg"].append(tg)
            meta[name] = j
    med = {k: {m: statistics.median(v[m]) for m in ("pp", "tg")} for k, v in res.items()}
    print(f"lithe: {Path(args.lithe_model or args.model).name}; llama.cpp: {Path(args.model).name}")
    print(f"model {Path(args.model).name}, {args.threads} threads, pp{args.p} / tg{args.n}, median of {args.r}, "
          f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}")
    print(f"{'engine':<12} {'pp tok/s':>10} {'tg tok/s':>10}")
    for k in res:
        print(f"{k:<12} {med[k]['pp']:10.1f} {med[k]['tg']:10.1f}   runs pp {['%.0f' % x for x in res[k]['pp']]} "
              f"tg {['%.0f' % x for x in res[k]['tg']]}")
    r_pp = med["lithe"]["pp"] / med["llama.cpp"]["pp"]
    r_tg = med["lithe"]["tg"] / med["llama.cpp"]["tg"]
    print(f"ratio lithe / llama.cpp: pp {r_pp:.2f}x (target >= 0.8), tg {r_tg:.2f}x (target >= 1.0)")
    print(f"lithe decode reads {meta['lithe']['decode_gb_per_second']:.1f} GB/s; llama.cpp "
          f"{meta['llama.cpp']['version']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"median": med, "runs": res, "ratio_pp": r_pp, "ratio_tg": r_tg,
                                               "threads": args.threads, "model": args.model}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
