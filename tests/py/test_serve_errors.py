"""Bad requests to `lithe serve`: each gets an OpenAI-style error JSON ({"error": {message, type,
param, code}}) with the right 4xx status, and the server keeps answering other clients."""
import json
import urllib.error
import urllib.request

import openai
import pytest

from lithe_server import server_fixture

server = server_fixture("--ctx", "256", "--api-key", "sekret", "--max-body-kib", "64")
KEY = {"Authorization": "Bearer sekret"}


def post(server, path, body: bytes, headers=KEY):
    req = urllib.request.Request(server.url + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def completion(**kw):
    return json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "Hello", "max_tokens": 2, **kw}).encode()


def chat(**kw):
    return json.dumps({"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": 2, **kw}).encode()


CASES = [
    # (path, body, status, param, code, words in the message)
    ("/v1/completions", b"{not json", 400, None, "invalid_json", "not valid JSON"),
    ("/v1/completions", b"[1, 2]", 400, None, "invalid_type", "JSON object"),
    ("/v1/completions", b'{"model": "SmolLM2-135M-Instruct.Q4_1", "prompt": "\xff\xfe"}', 400, None, "invalid_json",
     "UTF-8"),
    ("/v1/completions", completion(model="gpt-4"), 404, "model", "model_not_found", "'gpt-4' does not exist"),
    ("/v1/completions", json.dumps({"prompt": "x"}).encode(), 400, "model", "missing_required_parameter", "model"),
    ("/v1/completions", completion(max_tokens="ten"), 400, "max_tokens", "invalid_type", "an integer"),
    ("/v1/completions", completion(max_tokens=0), 400, "max_tokens", "invalid_value", "at least 1"),
    ("/v1/completions", completion(max_tokens=-5), 400, "max_tokens", "invalid_value", "at least 1"),
    ("/v1/completions", completion(max_tokens=100000), 400, "max_tokens", "context_length_exceeded", "context is 256"),
    ("/v1/completions", completion(prompt="word " * 400), 400, "prompt", "context_length_exceeded", "shorten"),
    ("/v1/completions", completion(temperature="hot"), 400, "temperature", "invalid_type", "a number"),
    ("/v1/completions", completion(temperature=5), 400, "temperature", "invalid_value", "[0, 2]"),
    ("/v1/completions", completion(top_p=1.5), 400, "top_p", "invalid_value", "[0, 1]"),
    ("/v1/completions", completion(n=3), 400, "n", "unsupported_value", "n = 1"),
    ("/v1/completions", completion(stop=5), 400, "stop", "invalid_type", "list of strings"),
    ("/v1/completions", completion(stop=[""]), 400, "stop", "invalid_value", "empty"),
    ("/v1/completions", completion(stream="yes"), 400, "stream", "invalid_type", "a boolean"),
    ("/v1/completions", completion(logprobs=9), 400, "logprobs", "invalid_value", "[0, 5]"),
    ("/v1/completions", completion(prompt=["a", "b"]), 400, "prompt", "unsupported_value", "one per request"),
    ("/v1/completions", completion(prompt=""), 400, "prompt", "invalid_value", "empty"),
    ("/v1/completions", completion(prompt=None), 400, "prompt", "missing_required_parameter", "required"),
    ("/v1/completions", completion(echo=True), 400, "echo", "unsupported_value", "echo"),
    ("/v1/chat/completions", chat(messages=[]), 400, "messages", "invalid_value", "empty"),
    ("/v1/chat/completions", chat(messages="hi"), 400, "messages", "invalid_type", "an array"),
    ("/v1/chat/completions", chat(messages=[{"role": "wizard", "content": "x"}]), 400, "messages[0].role",
     "invalid_value", "'wizard'"),
    ("/v1/chat/completions", chat(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content",
     "invalid_type", "string"),
    ("/v1/chat/completions", chat(top_logprobs=2), 400, "top_logprobs", "invalid_value", "logprobs"),
    ("/v1/chat/completions", chat(max_completion_tokens=0), 400, "max_completion_tokens", "invalid_value",
     "at least 1"),
]


@pytest.mark.parametrize("path,body,status,param,code,words", CASES, ids=[f"{i}-{c[4]}" for i, c in enumerate(CASES)])
def test_bad_request_is_an_openai_error(server, path, body, status, param, code, words):
    got, j = post(server, path, body)
    assert got == status, j
    err = j["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["code"] == code
    assert words in err["message"], err["message"]


def test_body_over_the_limit_is_413(server):
    got, j = post(server, "/v1/completions", completion(prompt="x" * 100_000))
    assert got == 413 and j["error"]["code"] == "request_too_large" and "65536 bytes" in j["error"]["message"]


def test_unknown_route_is_404_json(server):
    got, j = post(server, "/v1/embeddings", b"{}")
    assert got == 404 and j["error"]["code"] == "not_found"


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekret"}])
def test_api_key_is_required(server, headers):
    got, j = post(server, "/v1/completions", completion(), headers=headers)
    assert got == 401 and j["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        server.client(api_key="wrong").models.list()
    # health, metrics and the page stay open
    assert urllib.request.urlopen(server.url + "/health", timeout=30).status == 200


def test_server_keeps_serving_after_all_that(server):
    client = server.client(api_key="sekret")
    r = client.completions.create(model=server.model, prompt="The capital of France is", max_tokens=4, temperature=0)
    assert "Paris" in r.choices[0].text
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="x", max_tokens=0)
    assert e.value.status_code == 400 and e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert server.proc.poll() is None
