"""StreamingLLM through the CLI on the default model: chat with a sink cache goes past a tiny
context, perplexity --stream reports the segment table (JSON) and writes the plot, and bad
--cache / --sinks / --window values or a missing file are refused with a message naming them."""
import subprocess

import pytest

from conftest import LITHE, ROOT, run_json, run_lithe

TEXT = ROOT / "data/sotu-eval.txt"


def test_chat_with_a_sink_cache_goes_past_the_context(default_model):
    lines = "\n".join(f"Tell me one fact about the number {i}." for i in range(6)) + "\n/exit\n"
    p = subprocess.run([str(LITHE), "chat", "-m", default_model, "--temp", "0", "-n", "24", "--ctx", "64",
                        "--cache", "sink", "--sinks", "4"], input=lines, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "no longer fits" not in p.stderr
    assert len(p.stdout.strip().splitlines()) >= 6  # one reply per turn
    # The full cache in the same context gives up on the conversation.
    p = subprocess.run([str(LITHE), "chat", "-m", default_model, "--temp", "0", "-n", "24", "--ctx", "64"],
                       input=lines, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "no longer fits" in p.stderr


def test_stream_perplexity_json_segments_and_plot(default_model, tmp_path):
    plot = tmp_path / "stream.png"
    j = run_json("perplexity", "--stream", "-m", default_model, "-f", TEXT, "--cache", "window,sink,recompute,full",
                 "--window", "16", "--sinks", "4", "--ctx", "48", "--max-tokens", "101", "--segment", "40",
                 "--plot", plot, "--json")
    assert j["text_tokens"] > 200000
    runs = {r["cache"]: r for r in j["runs"]}
    assert set(runs) == {"window", "sink", "recompute", "full"}
    for name in ("window", "sink", "recompute"):
        r = runs[name]
        assert r["tokens"] == 100 and r["ppl"] > 1
        assert [(s["start"], s["end"]) for s in r["segments"]] == [(0, 40), (40, 80), (80, 100)]
        assert all(s["ppl"] > 1 for s in r["segments"]) and r["curve"][-1][0] == 100
    assert runs["sink"]["span"] == 20 and runs["sink"]["sinks"] == 4 and runs["window"]["sinks"] == 0
    assert runs["full"]["stopped_at_context"] and runs["full"]["tokens"] == 48
    # 40 tokens > the window of 16: window-only has evicted its first tokens within the first segment.
    assert runs["window"]["segments"][0]["ppl"] != runs["sink"]["segments"][0]["ppl"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,needle", [
    (["--cache", "bogus"], "'bogus'"),
    (["--cache", "sink", "--window", "0"], "--window 0"),
    (["--cache", "sink", "--sinks", "-1"], "--sinks -1"),
    (["--cache", "window", "--window", "9000"], "9000"),
])
def test_stream_bad_cache_options_are_named(default_model, args, needle):
    p = run_lithe("perplexity", "--stream", "-m", default_model, "-f", TEXT, "--max-tokens", "8", *args, check=False)
    assert p.returncode != 0 and needle in p.stderr, p.stderr


def test_stream_missing_file_and_chat_bad_policy(default_model, tmp_path):
    p = run_lithe("perplexity", "--stream", "-m", default_model, "-f", tmp_path / "nope.txt", check=False)
    assert p.returncode != 0 and "nope.txt" in p.stderr
    p = subprocess.run([str(LITHE), "chat", "-m", default_model, "--cache", "recompute"], input="/exit\n",
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "recompute" in p.stderr


def test_serve_with_a_sink_cache_runs_a_request_past_the_context():
    from lithe_server import LitheServer
    srv = LitheServer("--ctx", "64", "--cache", "sink", "--sinks", "4")
    try:
        c = srv.client()
        r = c.completions.create(model=srv.model, prompt="The history of the United States " * 12, max_tokens=40,
                                 temperature=0)
        assert r.usage.prompt_tokens + r.usage.completion_tokens > 64
        assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"
    finally:
        assert srv.stop() == 0
