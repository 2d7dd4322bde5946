"""The scheduler under load: simultaneous greedy requests return exactly what each returns alone
(continuous batching, chunked prefill, and preemption when KV blocks run out must not change a
token), a client that disconnects is cancelled, and SIGTERM lets requests in flight finish."""
import concurrent.futures as cf
import json
import socket
import threading
import time
import urllib.request

import pytest

from lithe_server import LitheServer, server_fixture

server = server_fixture("--ctx", "512", "--max-batch", "16", "--batch-tokens", "64")
PROMPTS = [
    "The capital of France is", "Once upon a time", "1, 2, 3, 4,", "The best way to learn Python is",
    "Water boils at", "My favourite colour is", "The three branches of the United States government are",
    "In 1492,", "def fibonacci(n):", "The moon orbits", "Dear Sir or Madam,", "A haiku about autumn:",
    "The quick brown fox", "To make a cup of tea,", "Photosynthesis is the process", "Here is a list of fruits:",
]


def complete(client, model, prompt, max_tokens=24, **kw):
    r = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, **kw)
    return r.choices[0].text, r.choices[0].finish_reason


def test_16_simultaneous_greedy_requests_match_each_alone(server):
    client = server.client()
    alone = [complete(client, server.model, p) for p in PROMPTS]
    iters0 = server.metric("lithe_iterations_total")
    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        together = list(ex.map(lambda p: complete(client, server.model, p), PROMPTS))
    assert together == alone
    iters = server.metric("lithe_iterations_total") - iters0
    # batched: far fewer forward passes than 16 requests x 24 tokens run one by one
    assert iters < len(PROMPTS) * 24 / 2, iters


def test_long_prompts_are_prefilled_in_chunks(server):
    """--batch-tokens 64: a 300-token prompt takes several iterations while others decode."""
    client = server.client()
    long_prompt = "The history of the city: " + "It grew and it changed over the years. " * 30
    alone = [complete(client, server.model, p, max_tokens=8) for p in (long_prompt, PROMPTS[0], PROMPTS[1])]
    with cf.ThreadPoolExecutor(3) as ex:
        together = list(ex.map(lambda p: complete(client, server.model, p, max_tokens=8),
                               (long_prompt, PROMPTS[0], PROMPTS[1])))
    assert together == alone


def test_preemption_when_kv_blocks_run_out_keeps_the_text():
    # 12 blocks x 8 tokens: 6 requests needing ~5 blocks each cannot all hold their context at once.
    s = LitheServer("--ctx", "128", "--kv-blocks", "12", "--block-size", "8", "--max-batch", "8")
    try:
        client = s.client()
        prompts = PROMPTS[:6]
        alone = [complete(client, s.model, p, max_tokens=30) for p in prompts]
        with cf.ThreadPoolExecutor(len(prompts)) as ex:
            together = list(ex.map(lambda p: complete(client, s.model, p, max_tokens=30), prompts))
        assert together == alone
        assert s.metric("lithe_preemptions_total") > 0
        assert s.metric("lithe_kv_blocks_free") == 12
        with pytest.raises(Exception) as e:  # can never fit the pool
            client.completions.create(model=s.model, prompt="hi", max_tokens=120)
        assert "KV blocks" in str(e.value)
    finally:
        assert s.stop() == 0


def raw_stream(url, body):
    """Opens a streaming POST on a raw socket; returns the socket after the first event arrived."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(data) + data)
    got = b""
    while b"data: " not in got:
        got += sock.recv(4096)
    return sock


def test_disconnected_client_is_cancelled(server):
    before = server.metric("lithe_cancelled_total")
    sock = raw_stream(server.url, {"model": server.model, "prompt": "Once upon a time", "max_tokens": 400,
                                   "temperature": 0, "stream": True})
    sock.close()
    assert server.wait_metric("lithe_cancelled_total", lambda v: v > before, timeout=30)
    assert server.wait_metric("lithe_running_sequences", lambda v: v == 0, timeout=30)


def test_sigterm_finishes_requests_in_flight_then_exits():
    s = LitheServer("--ctx", "256")
    client = s.client()
    result = {}

    def run():
        stream = client.completions.create(model=s.model, prompt="Once upon a time", max_tokens=60, temperature=0,
                                           stream=True)
        chunks = list(stream)
        result["text"] = "".join(c.choices[0].text for c in chunks)
        result["finish"] = chunks[-1].choices[0].finish_reason

    t = threading.Thread(target=run)
    t.start()
    assert s.wait_metric("lithe_generated_tokens_total", lambda v: v >= 2, timeout=60)
    code = s.stop()
    t.join(timeout=60)
    assert code == 0
    assert result.get("finish") == "length" and len(result["text"]) > 20
    with pytest.raises(OSError):  # no longer accepting
        urllib.request.urlopen(s.url + "/health", timeout=5)
