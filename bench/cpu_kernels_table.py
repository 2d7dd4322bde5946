#!/usr/bin/env python3
"""Markdown tables for bench/RESULTS-cpu-kernels.md from bench_cpu_kernels' JSON output.

    build/bin/bench_cpu_kernels --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
        --benchmark_format=json > cpu.json
    python3 bench/cpu_kernels_table.py cpu.json [ceilings.json]

Uses the median of the repetitions. With a second file, the memcpy / read ceilings and the pool
round trip come from it (e.g. a run of just those taken while the machine was otherwise idle). Ratios are against the memcpy bandwidth measured in the same
run with all pool threads (bytes copied per second) and against the read-only stream.
"""
import collections
import json
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    med = {}
    for b in d["benchmarks"]:
        if b.get("aggregate_name") not in (None, "median"):
            continue
        name = b["run_name"].removesuffix("/real_time")
        med[name] = b
    return d["context"], med


DTYPES = ["q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "f16", "bf16", "f32"]
SHAPES = ["576x576", "192x576", "1536x576", "576x1536", "4096x4096", "49152x576"]
ISAS = ["scalar", "avx2", "avx512"]


def order(key):
    """Sort key for (kernel, dtype, shape) / (dtype, shape) tuples."""
    out = []
    for k in key:
        if k in DTYPES:
            out.append((1, DTYPES.index(k)))
        elif k in SHAPES:
            out.append((2, SHAPES.index(k)))
        else:
            out.append((0, k))
    return out


def fmt(v, digits=1):
    return f"{v:.{digits}f}" if v is not None else "-"


def main(path, ceiling_path=None):
    ctx, b = load(path)
    if ceiling_path:
        _, c = load(ceiling_path)
        b.update({k: v for k, v in c.items() if k.split("/")[0] in ("memcpy", "read", "pool")})
    memcpy = b.get("memcpy/256MB/pool", {}).get("GB/s")
    read = b.get("read/256MB/pool", {}).get("GB/s")
    print(f"Context: {ctx.get('date')}, {ctx.get('num_cpus')} CPUs at {ctx.get('mhz_per_cpu')} MHz, "
          f"detected ISA {ctx.get('detected_isa')}, {ctx.get('threads')} pool threads\n")
    print("| ceiling | 1 thread GB/s | pool GB/s |\n|---|---|---|")
    for k in ("memcpy", "read"):
        print(f"| {k} 256 MB | {fmt(b.get(f'{k}/256MB/1thread', {}).get('GB/s'))} | "
              f"{fmt(b.get(f'{k}/256MB/pool', {}).get('GB/s'))} |")
    rt = b.get("pool/round_trip")
    if rt:
        print(f"| pool round trip | {fmt(rt['real_time'], 1)} {rt['time_unit']} | |")
    print()

    # linear, m = 1
    rows = collections.OrderedDict()
    isas = []
    for name, r in b.items():
        p = name.split("/")
        if p[0] not in ("linear", "linear_hot") or p[3] != "m1":
            continue
        key = (p[0], p[1], p[2])
        rows.setdefault(key, {})[p[4]] = r.get("GB/s")
        if p[4] not in isas:
            isas.append(p[4])
    isas.sort(key=ISAS.index)
    rows = dict(sorted(rows.items(), key=lambda kv: order((kv[0][1], kv[0][2], kv[0][0]))))
    print("Matrix-vector (m = 1), weight GB/s; x memcpy = ratio to the pool memcpy rate"
          + (f" ({fmt(memcpy)} GB/s)" if memcpy else "") + ":\n")
    print("| kernel | dtype | n_out x n_in | " + " | ".join(f"{i} GB/s | x memcpy" for i in isas) + " |")
    print("|---|---|---|" + "---|---|" * len(isas))
    for (kind, dt, shape), v in rows.items():
        cells = []
        for i in isas:
            g = v.get(i)
            cells += [fmt(g), fmt(g / memcpy, 2) if g and memcpy else "-"]
        print(f"| {kind} | {dt} | {shape} | " + " | ".join(cells) + " |")
    print()

    # linear, m = 512
    rows = collections.OrderedDict()
    isas = []
    for name, r in b.items():
        p = name.split("/")
        if p[0] != "linear" or p[3] != "m512":
            continue
        rows.setdefault((p[1], p[2]), {})[p[4]] = r.get("GFLOP/s")
        if p[4] not in isas:
            isas.append(p[4])
    isas.sort(key=ISAS.index)
    rows = dict(sorted(rows.items(), key=lambda kv: order(kv[0])))
    print("Matrix-matrix (m = 512), GFLOP/s:\n")
    print("| dtype | n_out x n_in | " + " | ".join(isas) + " |")
    print("|---|---|" + "---|" * len(isas))
    for (dt, shape), v in rows.items():
        print(f"| {dt} | {shape} | " + " | ".join(fmt(v.get(i)) for i in isas) + " |")
    print()

    print("Whole SmolLM2-135M linear stack (211 linears, 92 MB) and other ops:\n")
    print("| benchmark | time | tok/s | GB/s | GFLOP/s |\n|---|---|---|---|---|")
    for name, r in sorted(b.items()):
        if name.split("/")[0] in ("smollm2", "attention", "rowops"):
            print(f"| {name} | {fmt(r['real_time'], 2)} {r['time_unit']} | {fmt(r.get('tok/s'))} | "
                  f"{fmt(r.get('GB/s'))} | {fmt(r.get('GFLOP/s'))} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
