"""PyTorch's own int4 kernel, the issue's peer: `torch._weight_int4pack_mm` (tinygemm: bf16
activations, int4 weights, group 128, asymmetric as bf16 scale + zero) on the Llama-2-7B layer
shapes, next to cuBLAS through `torch.matmul` on the same weights in f16, measured the way
bench_cuda_gq_gemv and bench_cuda_qgemm measure lithe's kernels (run it in the same call):

- every timed call reads its weights from HBM: calls rotate over K copies of the packed weights
  (K = max(2, ceil(3 x L2 / bytes)));
- the calls are queued behind a GPU spin so the CPU's launch cost is hidden; "us" is the median
  over the calls of the time between events recorded between consecutive calls (3 warm-ups);
- "rel diff" = max |y - ref| / max |ref| against the same int4 weights dequantized, in f32 (the
  packing is checked before anything is timed).

    python3 bench/torch_int4pack.py [--m 1,8,16,32,64,128] [--reps 50] [--json F]
"""
import argparse
import json
import statistics

import torch

# (n_in, n_out) as lithe's tables name them: x [m, n_in] times W^T, W [n_out, n_in].
SHAPES = [(4096, 4096), (4096, 11008), (11008, 4096), (4096, 14336), (14336, 4096)]
GROUP = 128


def pack(n_in, n_out, gen):
    """Random int4 codes, scales and zeros; returns (tinygemm weight, scales_and_zeros, dequantized f32 W)."""
    q = torch.randint(0, 16, (n_out, n_in), generator=gen, dtype=torch.int32)
    scale = torch.rand(n_out, n_in // GROUP, generator=gen) * 0.02 + 0.001
    zero = torch.randint(0, 16, (n_out, n_in // GROUP), generator=gen).float()
    # Reference: W = scale * (q - zero). tinygemm computes W = (q - 8) * s + z' with s, z' in bf16.
    s_bf = scale.to(torch.bfloat16)
    z_bf = ((8 - zero) * scale).to(torch.bfloat16)
    w = (q.float() - 8).view(n_out, -1, GROUP) * s_bf.float().unsqueeze(-1) + z_bf.float().unsqueeze(-1)
    w = w.view(n_out, n_in).cuda()
    sz = torch.stack([s_bf, z_bf], dim=-1).transpose(0, 1).contiguous().cuda()  # [n_in / G, n_out, 2]
    x = torch.randn(4, n_in, device="cuda", dtype=torch.bfloat16)
    ref = x.float() @ w.t()
    for hi, lo in ((q[:, ::2], q[:, 1::2]), (q[:, 1::2], q[:, ::2])):  # which nibble holds the even column
        wp = torch._convert_weight_to_int4pack((hi << 4 | lo).to(torch.uint8).cuda(), 8)
        y = torch._weight_int4pack_mm(x, wp, GROUP, sz).float()
        if ((y - ref).abs().max() / ref.abs().max()).item() < 2e-2:
            return wp, sz, w
    raise SystemExit(f"could not pack {n_in} x {n_out} for _weight_int4pack_mm")


def time_calls(fns, reps):
    """Median us between consecutive calls of fns[i % len(fns)] queued behind a spin."""
    for f in fns[:3]:
        f()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    torch.cuda._sleep(50_000_000)
    for i in range(reps):
        ev[i].record()
        fns[i % len(fns)]()
    ev[reps].record()
    torch.cuda.synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(reps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", default="1,8,16,32,64,128")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    ms = [int(x) for x in args.m.split(",")]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    gen = torch.Generator().manual_seed(0)
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, L2 {l2 / 2**20:.0f} MiB")
    print("| n_in x n_out | m | torch int4pack us | cuBLAS f16 us | x f16 | rel diff |")
    print("|---|---|---|---|---|---|")
    rows = []
    for n_in, n_out in SHAPES:
        wp, sz, w = pack(n_in, n_out, gen)
        pbytes = wp.numel() * wp.element_size() + sz.numel() * 2
        k = max(2, -(-3 * l2 // pbytes))
        wps = [wp] + [wp.clone() for _ in range(k - 1)]
        szs = [sz] + [sz.clone() for _ in range(k - 1)]
        w16 = w.half()
        k16 = max(2, -(-3 * l2 // (w16.numel() * 2)))
        w16s = [w16] + [w16.clone() for _ in range(k16 - 1)]
        for m in ms:
            x = torch.randn(m, n_in, generator=gen).cuda()
            xb, xh = x.to(torch.bfloat16), x.half()
            y = torch._weight_int4pack_mm(xb, wp, GROUP, sz).float()
            ref = xb.float() @ w.t()
            rel = ((y - ref).abs().max() / ref.abs().max()).item()
            assert rel < 2e-2, f"int4pack wrong on {n_in}x{n_out} m={m}: rel diff {rel}"
            t4 = time_calls([lambda i=i: torch._weight_int4pack_mm(xb, wps[i], GROUP, szs[i]) for i in range(k)],
                            args.reps)
            th = time_calls([lambda i=i: torch.matmul(xh, w16s[i].t()) for i in range(k16)], args.reps)
            rows.append(dict(n_in=n_in, n_out=n_out, m=m, int4pack_us=t4, cublas_f16_us=th, rel_diff=rel))
            print(f"| {n_in} x {n_out} | {m} | {t4:.2f} | {th:.2f} | {th / t4:.2f}x | {rel:.1e} |", flush=True)
        del wps, szs, w16s
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
