"""Evidence for `lithe export --format hf`: transformers loads the exported directory, and its
logits equal those transformers computes when it loads the GGUF file itself.

Needs torch + transformers + gguf (too heavy for CI; run by hand):
    python -m venv /tmp/venv-hf && /tmp/venv-hf/bin/pip install torch transformers gguf tokenizers
    build/bin/lithe export -m models/SmolLM2-135M-Instruct.Q4_1.gguf -o out/smollm2-f32 --dtype f32 --force
    /tmp/venv-hf/bin/python tests/gen/check_export_with_transformers.py out/smollm2-f32 \
        models/SmolLM2-135M-Instruct.Q4_1.gguf
Prints one line per prompt and exits non-zero when logits differ by more than --tol.
"""
import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "The President of the United States shall, from time to time,",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village by the sea,",
    "The capital of France is",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exported_dir")
    ap.add_argument("gguf_file")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    gguf = Path(a.gguf_file).resolve()
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32).eval()
    ours = AutoModelForCausalLM.from_pretrained(a.exported_dir, torch_dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    exported_tok = AutoTokenizer.from_pretrained(a.exported_dir)
    worst = 0.0
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt").input_ids
        same_ids = exported_tok(p, return_tensors="pt").input_ids.tolist() == ids.tolist()
        print(f"exported tokenizer gives the same ids: {same_ids}")
        if not same_ids:
            return 1
        with torch.no_grad():
            lr = ref(ids).logits[0]
            lo = ours(ids).logits[0]
        diff = (lr - lo).abs().max().item()
        nmse = ((lr - lo) ** 2).sum().item() / (lr**2).sum().item()
        worst = max(worst, diff)
        same_top = bool((lr.argmax(-1) == lo.argmax(-1)).all())
        print(f"{len(ids[0]):3d} tokens  max|Δlogit| {diff:.3e}  NMSE {nmse:.3e}  argmax equal {same_top}  {p[:40]!r}")
    print(f"worst max abs difference: {worst:.3e}")
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
