"""`lithe tokenize` and `lithe detokenize` end to end (binaries from build/bin or $LITHE_BIN_DIR)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LITHE_BIN_DIR", ROOT / "build" / "bin"))
GPT2 = ROOT / "tests" / "data" / "tokenizer-vectors" / "ggml-vocab-gpt-2.gguf"
SPM = ROOT / "tests" / "data" / "tokenizer-vectors" / "ggml-vocab-llama-spm.gguf"
MINILM = ROOT / "tests" / "data" / "tokenizer" / "all-MiniLM-L6-v2"


def lithe(*args, stdin=None, check=True):
    exe = BIN / "lithe"
    assert exe.exists(), f"{exe} is missing: build lithe (or set LITHE_BIN_DIR)"
    p = subprocess.run([str(exe), *map(str, args)], input=stdin, capture_output=True, timeout=120)
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p


def test_tokenize_ids_from_argument_and_stdin():
    a = lithe("tokenize", "-m", GPT2, "--ids", "Hello world").stdout.decode().split()
    assert a == ["15496", "995"]  # llama.cpp's vector for "Hello world"
    b = lithe("tokenize", "-m", GPT2, "--ids", stdin="Hello world".encode()).stdout.decode().split()
    assert b == a


def test_tokenize_json_and_pieces():
    j = json.loads(lithe("tokenize", "-m", GPT2, "--json", " Hello World!").stdout)
    assert j == {"ids": [18435, 2159, 0], "pieces": [" Hello", " World", "!"]}
    assert json.loads(lithe("tokenize", "-m", GPT2, "--json", "--ids", "Hello").stdout) == [15496]
    pieces = lithe("tokenize", "-m", GPT2, "--pieces", "a\tb\n").stdout.decode().splitlines()
    assert pieces == ["a", "\\t", "b", "\\n"]
    default = lithe("tokenize", "-m", GPT2, "Hello").stdout.decode()
    assert default == "15496\tHello\n"


def test_special_tokens_and_bos():
    plain = lithe("tokenize", "-m", SPM, "--ids", "<s>Hi").stdout.decode().split()
    parsed = lithe("tokenize", "-m", SPM, "--ids", "--parse-special", "<s>Hi").stdout.decode().split()
    assert parsed[0] == "1" and "1" not in plain
    with_bos = lithe("tokenize", "-m", SPM, "--ids", "--add-special", "Hi").stdout.decode().split()
    assert with_bos[0] == "1" and with_bos[1:] == lithe("tokenize", "-m", SPM, "--ids", "Hi").stdout.decode().split()
    bert = lithe("tokenize", "-m", MINILM, "--ids", "--add-special", "hello").stdout.decode().split()
    assert bert == ["101", "7592", "102"]


def test_detokenize_round_trip_bytes():
    text = "Tabs\tand\nnewlines, emoji \U0001F680 and \u4e2d\u6587"
    ids = lithe("tokenize", "-m", GPT2, "--ids", stdin=text.encode()).stdout.decode().split()
    assert lithe("detokenize", "-m", GPT2, *ids).stdout == text.encode()
    assert lithe("detokenize", "-m", GPT2, stdin=",".join(ids).encode()).stdout == text.encode()
    spm_ids = lithe("tokenize", "-m", SPM, "--ids", stdin=text.encode()).stdout.decode().split()
    assert lithe("detokenize", "-m", SPM, *spm_ids).stdout == text.encode()


def test_batch_jsonl():
    texts = ["Hello world", "", "a\nb", "\U0001F680"]
    out = lithe("tokenize", "-m", GPT2, "--jsonl", stdin="".join(json.dumps(t) + "\n" for t in texts).encode())
    rows = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert rows[0] == [15496, 995] and rows[1] == [] and len(rows) == 4


def test_errors_name_the_problem():
    p = lithe("detokenize", "-m", GPT2, "15496", "50257", check=False)
    assert p.returncode == 1
    assert b"token id 50257 is out of range (vocabulary size 50257)" in p.stderr
    p = lithe("detokenize", "-m", GPT2, "12x", check=False)
    assert p.returncode == 1 and b"'12x' is not a token id" in p.stderr
    p = lithe("tokenize", "-m", GPT2, stdin=b"ok \xff bad", check=False)
    assert p.returncode == 1 and b"not valid UTF-8" in p.stderr and b"offset 3" in p.stderr
    p = lithe("tokenize", "-m", GPT2, "--replace-invalid", "--ids", stdin=b"ok \xff bad")
    assert p.stdout.decode().split() == lithe("tokenize", "-m", GPT2, "--ids", "ok \ufffd bad").stdout.decode().split()
    p = lithe("tokenize", "-m", ROOT / "no-such-model.gguf", "x", check=False)
    assert p.returncode == 1 and b"no-such-model.gguf" in p.stderr
