"""`lithe serve` end to end, as a client uses it: the official openai package (completions, chat,
streaming, stop strings, seeds, logprobs, usage), curl (SSE framing), /v1/models, /health and
/metrics."""
import json
import subprocess

import pytest

from lithe_server import server_fixture

server = server_fixture("--ctx", "512")
PROMPT = "The capital of France is"


def test_models_health_and_metrics(server):
    client = server.client()
    ids = [m.id for m in client.models.list().data]
    assert ids == [server.model] == ["SmolLM2-135M-Instruct.Q4_1"]
    out = subprocess.run(["curl", "-sf", server.url + "/health"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"status": "ok"}
    client.completions.create(model=server.model, prompt=PROMPT, max_tokens=2, temperature=0)
    text = subprocess.run(["curl", "-sf", server.url + "/metrics"], capture_output=True, text=True, check=True).stdout
    for name in ["lithe_requests_total{endpoint=\"/v1/completions\",code=\"200\"}", "lithe_generated_tokens_total",
                 "lithe_queue_depth", "lithe_batch_size_bucket", "lithe_time_to_first_token_seconds_count",
                 "lithe_inter_token_latency_seconds_sum", "lithe_kv_blocks_total"]:
        assert name in text, name
    assert server.metric("lithe_generated_tokens_total") >= 2


def test_completion_greedy_usage_and_length(server):
    r = server.client().completions.create(model=server.model, prompt=PROMPT, max_tokens=8, temperature=0)
    c = r.choices[0]
    assert r.object == "text_completion" and r.model == server.model and r.id.startswith("cmpl-")
    assert "Paris" in c.text and c.finish_reason == "length"
    assert r.usage.completion_tokens == 8 and r.usage.prompt_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streamed_completion_equals_the_whole_one(server):
    client = server.client()
    whole = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=12, temperature=0)
    chunks = list(client.completions.create(model=server.model, prompt=PROMPT, max_tokens=12, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    assert chunks[-1].usage.completion_tokens == 12 and not chunks[-1].choices
    assert len([c for c in chunks if c.choices and c.choices[0].text]) >= 4  # it really streamed


def test_chat_uses_the_template_and_streams(server):
    client = server.client()
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What color is the sky?"}]
    r = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=24, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    answer = r.choices[0].message.content
    assert "blue" in answer
    # The prompt is the chat template's rendering: more tokens than the bare question.
    assert r.usage.prompt_tokens > 15
    stream = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=24, temperature=0,
                                            stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == answer
    assert chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_stop_strings_cut_the_text(server):
    client = server.client()
    full = client.completions.create(model=server.model, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0)
    assert " 7" in full.choices[0].text
    want = full.choices[0].text[: full.choices[0].text.index(" 7")]
    r = client.completions.create(model=server.model, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0,
                                  stop=[" 7", "never"])
    assert r.choices[0].text == want and r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model=server.model, prompt="1, 2, 3, 4,", max_tokens=20, temperature=0,
                                            stop=" 7", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_same_seed_same_text(server):
    client = server.client()
    args = dict(model=server.model, prompt="Once upon a time", max_tokens=24, temperature=1.0, top_p=0.95)
    a = client.completions.create(seed=7, **args).choices[0].text
    b = client.completions.create(seed=7, **args).choices[0].text
    c = client.completions.create(seed=8, **args).choices[0].text
    d = client.completions.create(seed=9, **args).choices[0].text
    assert a == b
    assert len({a, c, d}) > 1  # other seeds draw other text
    s = "".join(x.choices[0].text for x in client.completions.create(seed=7, stream=True, **args))
    assert s == a


def test_penalties_change_greedy_text(server):
    client = server.client()
    args = dict(model=server.model, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0)
    plain = client.completions.create(**args).choices[0].text
    penal = client.completions.create(frequency_penalty=2.0, presence_penalty=2.0, **args).choices[0].text
    assert plain != penal


def test_logprobs(server):
    client = server.client()
    r = client.completions.create(model=server.model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 4 and "".join(lp.tokens) == r.choices[0].text
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and len(top) == 3
        assert max(top.values()) == pytest.approx(l)  # greedy: the chosen token is the most likely
    c = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
    content = c.choices[0].logprobs.content
    assert len(content) >= 1 and all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)
    assert bytes(content[0].bytes) == content[0].token.encode()


def test_curl_streams_server_sent_events(server):
    body = json.dumps({"model": server.model, "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "stream": True})
    p = subprocess.run(["curl", "-sN", "-H", "Content-Type: application/json", "-d", body,
                        server.url + "/v1/completions"], capture_output=True, text=True, timeout=120)
    events = [e for e in p.stdout.split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(e.startswith("data: ") for e in events)
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"
    assert "Paris" in "".join(x["choices"][0]["text"] for x in payloads)
    head = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null", "--compressed", "-d", body,
                           server.url + "/v1/completions"], capture_output=True, text=True, timeout=120).stdout
    assert "text/event-stream" in head and "Content-Encoding" not in head  # uncompressed: events arrive at once
