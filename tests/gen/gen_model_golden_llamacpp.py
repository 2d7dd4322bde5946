"""Golden results of llama.cpp (llama-cpp-python from PyPI, CPU) running the default model in
its native Q4_1 format: token ids, last-position logits, greedy continuations, and perplexity on
the first 40 windows of the SOTU evaluation split with the llamacpp protocol (windows of 512
tokens, second half scored), computed here from llama.cpp's own logits.

Writes tests/data/model/llamacpp_q4_1.json and tests/data/model/llamacpp_q4_1_logits.bin.
Run by hand:
    python -m venv /tmp/venv-llama && /tmp/venv-llama/bin/pip install llama-cpp-python numpy
    /tmp/venv-llama/bin/python tests/gen/gen_model_golden_llamacpp.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
        data/sotu-eval.txt
"""
import json
import sys
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).parent))
from model_prompts import GREEDY_PROMPTS, GREEDY_TOKENS, LOGIT_PROMPTS  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "data" / "model"
PPL_CTX = 512
PPL_WINDOWS = 40


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def main():
    gguf, text_file = sys.argv[1], sys.argv[2]
    llm = Llama(model_path=gguf, n_ctx=PPL_CTX, n_batch=PPL_CTX, logits_all=True, n_threads=2, verbose=False, seed=0)
    out = {"source": f"llama-cpp-python {llama_cpp.__version__}, {Path(gguf).name} (native Q4_1, CPU)",
           "logits": [], "greedy": []}
    rows = []
    for p in LOGIT_PROMPTS:
        ids = llm.tokenize(p.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
        rows.append(logits)
        out["logits"].append({"prompt": p, "ids": ids, "argmax": int(logits.argmax())})
    for p in GREEDY_PROMPTS:
        ids = llm.tokenize(p.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        gen = []
        for _ in range(GREEDY_TOKENS):
            t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            gen.append(t)
            llm.eval([t])
        out["greedy"].append({"prompt": p, "ids": ids, "tokens": gen})

    text = Path(text_file).read_text(encoding="utf-8")
    toks = llm.tokenize(text.encode(), add_bos=False, special=False)
    nll, count = 0.0, 0
    window_ppl = []
    for w in range(PPL_WINDOWS):
        chunk = toks[w * PPL_CTX:(w + 1) * PPL_CTX]
        llm.reset()
        llm.eval(chunk)
        wn, wc = 0.0, 0
        for j in range(PPL_CTX // 2, PPL_CTX - 1):
            wn -= log_softmax(np.asarray(llm.scores[j]))[chunk[j + 1]]
            wc += 1
        nll += wn
        count += wc
        window_ppl.append(float(np.exp(wn / wc)))
    out["perplexity"] = {"protocol": "llamacpp", "ctx": PPL_CTX, "windows": PPL_WINDOWS, "tokens": count,
                         "text_tokens": len(toks), "nll": nll / count, "ppl": float(np.exp(nll / count)),
                         "window_ppl": window_ppl, "text": "data/sotu-eval.txt"}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "llamacpp_q4_1.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    np.stack(rows).astype("<f4").tofile(OUT / "llamacpp_q4_1_logits.bin")
    print(f"perplexity {out['perplexity']['ppl']:.4f} over {count} tokens; wrote {OUT}")


if __name__ == "__main__":
    main()
