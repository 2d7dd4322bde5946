"""Tiny random checkpoints of each registered architecture family, with logits computed by Hugging
Face transformers, so that lithe's forward pass is checked per family against an independent
implementation: llama with llama3 RoPE scaling and untied output, mistral, qwen2 (q/k/v biases).

Each tests/data/tiny/<name>/ holds config.json, model.safetensors (f16 weights, hidden size 16)
and golden.json (input ids, last-position logits computed in f32 from the same f16 weights); the
default model's tokenizer files are stored once in tests/data/tiny/tokenizer/ (the test copies
them next to each model). Run by hand (needs torch + transformers):
    build/bin/lithe export -m models/SmolLM2-135M-Instruct.Q4_1.gguf -o out/smollm2-hf --force
    /tmp/venv-hf/bin/python tests/gen/gen_tiny_models.py out/smollm2-hf
"""
import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

OUT = Path(__file__).resolve().parents[1] / "data" / "tiny"
COMMON = dict(vocab_size=49152, hidden_size=16, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
FAMILIES = {
    "llama3": (LlamaForCausalLM, LlamaConfig(**COMMON, rope_theta=500000.0, tie_word_embeddings=False,
                                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                           "original_max_position_embeddings": 64})),
    "mistral": (MistralForCausalLM, MistralConfig(**COMMON, rope_theta=1e6, tie_word_embeddings=False,
                                                  sliding_window=None)),
    "qwen2": (Qwen2ForCausalLM, Qwen2Config(**COMMON, rope_theta=1e6, tie_word_embeddings=True)),
}
IDS = [1, 504, 3458, 282, 4649, 314, 28, 3, 17, 16, 1040, 42, 260, 2313, 15, 7, 99, 1000, 30000, 2]


def main():
    tok_dir = Path(sys.argv[1])
    (OUT / "tokenizer").mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tok_dir / f, OUT / "tokenizer" / f)
    for name, (cls, cfg) in FAMILIES.items():
        torch.manual_seed(hash(name) % 1000)
        model = cls(cfg).eval()
        with torch.no_grad():  # larger random weights than the default init, so logits differ visibly
            for p in model.parameters():
                p.normal_(0, 0.2) if p.dim() > 1 else p.uniform_(0.5, 1.5)
            model.half().float()  # the stored f16 values are exactly what both sides compute with
            logits = model(torch.tensor([IDS])).logits[0].numpy()
        d = OUT / name
        shutil.rmtree(d, ignore_errors=True)
        model.half().save_pretrained(d, safe_serialization=True)
        (d / "generation_config.json").unlink(missing_ok=True)
        (d / "golden.json").write_text(json.dumps({
            "source": f"transformers {transformers.__version__}, torch {torch.__version__}, f32 compute",
            "ids": IDS, "last_logits": [float(x) for x in logits[-1]],
            "argmax": [int(x) for x in logits.argmax(-1)]}) + "\n")
        print(name, "->", d, sorted(p.name for p in d.iterdir()))


if __name__ == "__main__":
    main()
