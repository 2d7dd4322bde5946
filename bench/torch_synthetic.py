"""PyTorch eager peer for `lithe bench --synthetic`: the same Llama shapes with random f16 weights
in transformers' LlamaForCausalLM on the GPU, plus the two physical references the CUDA targets
are stated against (device copy bandwidth and the cuBLAS f16 GEMM rate).

    python bench/torch_synthetic.py --model llama2-7b [-p 512] [-n 128] [-d 512] [-r 3] [--json F]

Prints prompt tokens/s (one forward of p tokens), decode tokens/s (n greedy steps after d context
tokens, KV cache on, batch 1), copy GB/s and GEMM TFLOP/s; medians of r runs.
"""
import argparse
import json
import statistics
import time

import torch

SHAPES = {
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, vocab_size=32000, rope_theta=10000.0),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0),
    "llama2-13b": dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40, num_attention_heads=40,
                       num_key_value_heads=40, vocab_size=32000, rope_theta=10000.0),
}


def sync_time(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def copy_bandwidth(reps=20):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    times = [sync_time(lambda: b.copy_(a)) for _ in range(reps)]
    return 2 * n / statistics.median(times) / 1e9  # read + write


def gemm_tflops(n=8192, reps=20):
    a = torch.randn(n, n, dtype=torch.float16, device="cuda")
    b = torch.randn(n, n, dtype=torch.float16, device="cuda")
    a @ b
    times = [sync_time(lambda: a @ b) for _ in range(reps)]
    return 2 * n ** 3 / statistics.median(times) / 1e12


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama2-7b", choices=sorted(SHAPES))
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-d", type=int, default=512)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**SHAPES[a.model], max_position_embeddings=8192, torch_dtype="float16")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.float16).eval()
    vocab = cfg.vocab_size
    prompt = torch.randint(0, vocab, (1, max(a.p, a.d, 1)), device="cuda")

    @torch.inference_mode()
    def prefill():
        model(prompt[:, :a.p], use_cache=False)

    @torch.inference_mode()
    def decode():
        out = model(prompt[:, :max(a.d, 1)], use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.n):
            out = model(tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    prefill()
    pp = [a.p / sync_time(prefill) for _ in range(a.r)]
    decode()
    tg = [a.n / decode() for _ in range(a.r)]
    res = dict(model=a.model, torch=torch.__version__, gpu=torch.cuda.get_device_name(),
               prompt_tokens=a.p, pp_tokens_per_s=statistics.median(pp), depth=a.d, gen_tokens=a.n,
               tg_tokens_per_s=statistics.median(tg), copy_gb_per_s=copy_bandwidth(),
               gemm_f16_tflops=gemm_tflops())
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
