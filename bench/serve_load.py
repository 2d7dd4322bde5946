"""Load test of `lithe serve` on loopback: C concurrent streaming clients send R requests in all
(default 64 and 1000) to /v1/completions; checks that none fails or is lost, and reports the
aggregate generated tokens/s against the single-stream rate measured on the same server before and
after the load (after --warmup requests that are not counted; --single requests each time),
plus time to first token and inter-token latency percentiles (p50/p90/p99).

    .venv/bin/python bench/serve_load.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
        [--clients 64] [--requests 1000] [--max-tokens 64] [--json out/serve_load.json]

It starts the server itself (build/bin/lithe serve on 127.0.0.1, a free port) unless --url names
a loopback server already running. Bounded: --deadline seconds for the whole run (default 900).
The clients are asyncio coroutines with a minimal HTTP/1.1 reader so that the client side costs
little CPU next to the server on the same machine.
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "The capital of France is", "Once upon a time", "The best way to learn a language is", "Water boils at",
    "Write a short story about a robot:", "The three branches of the United States government are",
    "Here is a recipe for pancakes:", "In the year 2050,", "The most important invention of the last century",
    "Dear diary, today", "A list of tips for better sleep:", "The history of the printing press",
]


async def stream_request(host, port, body):
    """One streaming completion; returns (ok, error, t_start, t_first, token_times, completion_tokens)."""
    t0 = time.perf_counter()
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (host.encode(), len(data)) + data)
        await writer.drain()
        status = (await reader.readline()).split()
        headers = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        if len(status) < 2 or status[1] != b"200":
            return False, f"HTTP {status[1:2]}: {(await reader.read())[:300]!r}", t0, None, [], 0
        times, usage, done, buf = [], 0, False, b""
        while not done:
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                break
            buf += await reader.readexactly(size + 2)
            buf = buf[:-2] if buf.endswith(b"\r\n") else buf
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue  # comments (heartbeats)
                payload = event[6:]
                if payload == b"[DONE]":
                    done = True
                    break
                j = json.loads(payload)
                if "error" in j:
                    return False, j["error"]["message"], t0, None, times, 0
                if j.get("usage"):
                    usage = j["usage"]["completion_tokens"]
                if j.get("choices") and j["choices"][0]["text"]:
                    times.append(time.perf_counter())
        if not done:
            return False, "stream ended without [DONE]", t0, None, times, usage
        return True, None, t0, times[0] if times else None, times, usage
    finally:
        writer.close()


async def run_load(host, port, model, n_requests, clients, max_tokens, temperature, seed, deadline):
    rng = random.Random(seed)
    queue = list(range(n_requests))
    results = []

    async def worker():
        while queue:
            i = queue.pop()
            body = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)], "stream": True,
                    "max_tokens": rng.randint(max_tokens // 2, max_tokens), "temperature": temperature,
                    "seed": i, "stream_options": {"include_usage": True}}
            try:
                results.append(await stream_request(host, port, body))
            except Exception as e:  # noqa: BLE001 (any failure counts)
                results.append((False, repr(e), 0, None, [], 0))

    t0 = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(clients))), deadline)
    return results, time.perf_counter() - t0


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--lithe", default=os.environ.get("LITHE_BIN", str(ROOT / "build/bin/lithe")))
    ap.add_argument("--url", help="a running server on loopback (default: start one)")
    ap.add_argument("--server-args", default="--max-batch 64", help="extra flags for lithe serve")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=4, help="sequential requests sent first and not counted")
    ap.add_argument("--single", type=int, default=16, help="sequential requests for the single-stream rate, before and after the load")
    ap.add_argument("--max-tokens", type=int, default=64, help="each request asks for U(max/2, max) tokens")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--deadline", type=float, default=900, help="seconds for the whole load phase")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args()
    if not (1 <= a.clients <= 256 and 1 <= a.requests <= 10000):
        sys.exit("--clients must be in [1, 256] and --requests in [1, 10000]")

    proc = None
    if a.url:
        url = a.url
    else:
        proc = subprocess.Popen([a.lithe, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", "0",
                                 *a.server_args.split()], stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, LITHE_LOG="warn"))
        line = proc.stdout.readline()
        if "listening on" not in line:
            sys.exit(f"lithe serve did not start: {line!r}")
        url = line.split("listening on ")[1].split()[0]
    u = urlparse(url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1"):
        sys.exit(f"{url}: loopback only")
    import urllib.request
    model = json.loads(urllib.request.urlopen(url + "/v1/models").read())["data"][0]["id"]
    try:
        # Warm-up: a fresh server's first requests pay for page faults and cold caches.
        if a.warmup > 0:
            asyncio.run(run_load(u.hostname, u.port, model, a.warmup, 1, a.max_tokens, a.temperature, 3, a.deadline))
        # The single stream (one request at a time) is timed before and after the load phase (the same
        # requests) and its rate is their generated tokens over their wall time: on a shared host a drift during the run then moves both
        # sides of the ratio, not just one.
        def single_stream(when):
            res, secs = asyncio.run(run_load(u.hostname, u.port, model, a.single, 1, a.max_tokens, a.temperature,
                                             1, a.deadline))
            toks = sum(r[5] for r in res if r[0])
            print(f"single stream {when}: {sum(1 for r in res if r[0])}/{a.single} ok, {toks} tokens in {secs:.1f} s "
                  f"= {toks / secs:.1f} tok/s", flush=True)
            return toks, secs

        single = [single_stream("before")]
        results, wall = asyncio.run(run_load(u.hostname, u.port, model, a.requests, a.clients, a.max_tokens,
                                             a.temperature, 2, a.deadline))
        single.append(single_stream("after"))
        single_rate = sum(t for t, _ in single) / sum(s for _, s in single)
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=120)
    ok = [r for r in results if r[0]]
    failed = [r for r in results if not r[0]]
    tokens = sum(r[5] for r in ok)
    ttft = [r[3] - r[2] for r in ok if r[3] is not None]
    itl = [b - a_ for r in ok for a_, b in zip(r[4], r[4][1:])]
    summary = {
        "clients": a.clients, "requests": a.requests, "completed": len(ok), "failed": len(failed),
        "lost": a.requests - len(results), "generated_tokens": tokens, "wall_seconds": round(wall, 2),
        "aggregate_tokens_per_second": round(tokens / wall, 1),
        "single_stream_tokens_per_second": round(single_rate, 1),
        "single_stream_before_after": [round(t / s, 1) for t, s in single],
        "speedup_vs_single_stream": round(tokens / wall / single_rate, 2),
        "ttft_seconds": {f"p{p}": round(pct(ttft, p), 4) for p in (50, 90, 99)},
        "inter_token_seconds": {f"p{p}": round(pct(itl, p), 4) for p in (50, 90, 99)},
        "mean_tokens_per_request": round(tokens / max(1, len(ok)), 1),
        "server_args": a.server_args, "max_tokens": a.max_tokens, "temperature": a.temperature,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    for r in failed[:5]:
        print("failure:", r[1], file=sys.stderr)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")
    sys.exit(1 if failed or len(results) != a.requests else 0)


if __name__ == "__main__":
    main()
