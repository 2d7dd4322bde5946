"""Golden logits and greedy tokens of the default model's full-precision (dequantized f32) form,
computed by Hugging Face transformers loading the GGUF file itself (an independent implementation
of both dequantization and the Llama forward pass).

Writes tests/data/model/hf_f32.json (token ids, greedy continuations, argmax) and
tests/data/model/hf_f32_logits.bin (float32 last-position logits, one row per prompt).
Run by hand (needs torch, transformers, gguf, accelerate):
    /tmp/venv-hf/bin/python tests/gen/gen_model_golden_hf.py models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).parent))
from model_prompts import GREEDY_PROMPTS, GREEDY_TOKENS, LOGIT_PROMPTS  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "data" / "model"


def main():
    gguf = Path(sys.argv[1]).resolve()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out = {"source": f"transformers {transformers.__version__}, torch {torch.__version__}, {gguf.name} dequantized f32",
           "logits": [], "greedy": []}
    rows = []
    for p in LOGIT_PROMPTS:
        ids = tok(p, add_special_tokens=False).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1].numpy().astype(np.float32)
        rows.append(logits)
        out["logits"].append({"prompt": p, "ids": ids, "argmax": int(logits.argmax())})
    for p in GREEDY_PROMPTS:
        ids = tok(p, add_special_tokens=False).input_ids
        with torch.no_grad():
            g = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, do_sample=False,
                               eos_token_id=None, pad_token_id=2)
        out["greedy"].append({"prompt": p, "ids": ids, "tokens": g[0, len(ids):].tolist()})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hf_f32.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    np.stack(rows).astype("<f4").tofile(OUT / "hf_f32_logits.bin")
    print(f"wrote {len(rows)} logit rows and {len(out['greedy'])} greedy runs to {OUT}")


if __name__ == "__main__":
    main()
