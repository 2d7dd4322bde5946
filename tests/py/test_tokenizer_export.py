"""lithe's Hugging Face tokenizer export, checked with the `tokenizers` library itself.

- The default model: `lithe export -m MODEL -o DIR --format hf` writes DIR/tokenizer.json; HF
  `tokenizers` loading it must give the golden ids of tests/data/tokenizer/smollm2_golden.jsonl
  (made by tests/gen/gen_tokenizer_golden.py from an independent reference) on all 400+ strings,
  and tokenizer_config.json must carry the GGUF's chat template.
- Every vocabulary of tests/data/tokenizer-vectors (byte-level BPE and SentencePiece) and the
  WordPiece one: exported by the C++ test TokenizerExport* (LITHE_TOKENIZER_EXPORT_DIR keeps the
  files), loaded by `tokenizers`, must reproduce llama.cpp's vectors / the WordPiece golden ids.

Binaries come from build/bin, or from $LITHE_BIN_DIR.
"""
import json
import os
import subprocess
from pathlib import Path

import pytest

tokenizers = pytest.importorskip("tokenizers")

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LITHE_BIN_DIR", ROOT / "build" / "bin"))
VECTORS = ROOT / "tests" / "data" / "tokenizer-vectors"
GOLDEN = ROOT / "tests" / "data" / "tokenizer"
VOCABS = ["gpt-2", "llama-bpe", "llama-spm", "phi-3", "starcoder"]


def read_vectors(name):
    inp = (VECTORS / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    texts = inp.split("\n__ggml_vocab_test__\n")[:-1]
    outs = (VECTORS / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, outs)]


def read_golden(name):
    lines = [l for l in (GOLDEN / name).read_text(encoding="utf-8").split("\n") if l]
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def model_path():
    env = os.environ.get("LITHE_TEST_MODEL")
    return Path(env) if env else ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def exported_vocabs(tmp_path_factory):
    exe = BIN / "lithe_unit_tests"
    assert exe.exists(), f"{exe} is missing: build lithe_unit_tests (or set LITHE_BIN_DIR)"
    out = tmp_path_factory.mktemp("tokenizer-export")
    p = subprocess.run([str(exe), "--gtest_filter=*TokenizerExport*"], capture_output=True, text=True,
                       env=dict(os.environ, LITHE_TOKENIZER_EXPORT_DIR=str(out)), timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    return out


@pytest.mark.parametrize("name", VOCABS)
def test_exported_vocabulary_reproduces_vectors(exported_vocabs, name):
    tok = tokenizers.Tokenizer.from_file(str(exported_vocabs / name / "tokenizer.json"))
    cases = read_vectors(name)
    assert len(cases) == 46
    for text, ids in cases:
        assert tok.encode(text, add_special_tokens=False).ids == ids, text
        assert tok.decode(ids, skip_special_tokens=False) == text, text


def test_exported_wordpiece_matches_golden(exported_vocabs):
    tok = tokenizers.Tokenizer.from_file(str(exported_vocabs / "all-MiniLM-L6-v2" / "tokenizer.json"))
    header, cases = read_golden("minilm_golden.jsonl")
    assert len(cases) == header["cases"] >= 300
    bad = [c["text"] for c in cases if tok.encode(c["text"], add_special_tokens=c["add_special"]).ids != c["ids"]]
    assert not bad, f"{len(bad)} of {len(cases)} differ, first: {bad[0]!r}"


def check_smollm2_golden(tok):
    header, cases = read_golden("smollm2_golden.jsonl")
    assert len(cases) == header["cases"] >= 300
    bad = []
    for c in cases:
        tok.encode_special_tokens = not c["parse_special"]
        ids = tok.encode(c["text"], add_special_tokens=False).ids
        if ids != c["ids"]:
            bad.append(c["text"])
        elif tok.decode(ids, skip_special_tokens=False) != c["text"]:
            bad.append("decode: " + c["text"])
    assert not bad, f"{len(bad)} of {len(cases)} differ, first: {bad[0]!r}"


def test_exported_default_model_tokenizer_matches_golden(exported_vocabs):
    """export_hf_tokenizer on the default model (from the C++ test), read by `tokenizers`."""
    path = exported_vocabs / "smollm2" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{model_path()} is missing: run scripts/fetch-model.sh (or set LITHE_TEST_MODEL)")
    check_smollm2_golden(tokenizers.Tokenizer.from_file(str(path)))


@pytest.fixture(scope="module")
def exported_default_model(tmp_path_factory):
    model = model_path()
    if not model.exists():
        pytest.skip(f"{model} is missing: run scripts/fetch-model.sh (or set LITHE_TEST_MODEL)")
    exe = BIN / "lithe"
    assert exe.exists(), f"{exe} is missing: build lithe (or set LITHE_BIN_DIR)"
    out = tmp_path_factory.mktemp("smollm2-hf") / "out"
    p = subprocess.run([str(exe), "export", "-m", str(model), "-o", str(out), "--format", "hf"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return model, out


def test_default_model_export_matches_golden(exported_default_model):
    _, out = exported_default_model
    check_smollm2_golden(tokenizers.Tokenizer.from_file(str(out / "tokenizer.json")))


def test_default_model_export_config(exported_default_model):
    model, out = exported_default_model
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(model))
    f = r.fields["tokenizer.chat_template"]
    template = bytes(f.parts[f.data[0]]).decode("utf-8")
    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == template
    assert config["eos_token"] == "<|im_end|>"
    assert config["bos_token"] == "<|im_start|>"
    assert config["add_bos_token"] is False
    special = json.loads((out / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert special["eos_token"] == "<|im_end|>"


# ---- the other direction: tokenizer.json files written the way Hugging Face writes them, loaded by lithe

def lithe_encode_batch(tokenizer_json, texts, parse_special):
    exe = BIN / "lithe"
    assert exe.exists(), f"{exe} is missing: build lithe (or set LITHE_BIN_DIR)"
    args = [str(exe), "tokenize", "-m", str(tokenizer_json), "--jsonl"] + (["--parse-special"] if parse_special else [])
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    p = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def spm_variant(exported_vocabs, tmp_path, name, pre_tokenizer):
    """The exported llama-spm tokenizer.json with its Prepend/Replace normalizer swapped for HF's
    newer Metaspace pre-tokenizer (how recent Llama/Mistral tokenizer.json files are written)."""
    j = json.loads((exported_vocabs / "llama-spm" / "tokenizer.json").read_text(encoding="utf-8"))
    j["normalizer"] = None
    j["pre_tokenizer"] = pre_tokenizer
    j["decoder"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": pre_tokenizer["prepend_scheme"],
                    "split": pre_tokenizer["split"]}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(j), encoding="utf-8")
    return path


SPECIAL_TEXTS = ["<s>Hello", "Hi</s> there", " <s> x", "a<unk>b", "<s>", "  two spaces<s>  after"]


@pytest.mark.parametrize("scheme,split", [("first", False), ("always", True), ("never", False)])
def test_lithe_loads_hf_metaspace_configs(exported_vocabs, tmp_path, scheme, split):
    path = spm_variant(exported_vocabs, tmp_path, f"metaspace-{scheme}-{split}",
                       {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split})
    hf = tokenizers.Tokenizer.from_file(str(path))
    texts = [t for t, _ in read_vectors("llama-spm")] + SPECIAL_TEXTS
    ours = lithe_encode_batch(path, texts, parse_special=True)
    for text, ids in zip(texts, ours):
        assert ids == hf.encode(text, add_special_tokens=False).ids, (scheme, split, text)


def test_lithe_loads_hf_bytelevel_config(tmp_path):
    """SmolLM2's own tokenizer.json layout (Digits + ByteLevel(use_regex=True)), as the golden
    generator builds it, read by lithe: the golden ids again."""
    model = model_path()
    if not model.exists():
        pytest.skip(f"{model} is missing: run scripts/fetch-model.sh (or set LITHE_TEST_MODEL)")
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "gen"))
    import gen_tokenizer_golden as gen
    path = tmp_path / "smollm2-reference.json"
    path.write_text(json.dumps(gen.reference_tokenizer_json(str(model))), encoding="utf-8")
    _, cases = read_golden("smollm2_golden.jsonl")
    for parse in (True, False):
        sub = [c for c in cases if c["parse_special"] == parse]
        ours = lithe_encode_batch(path, [c["text"] for c in sub], parse_special=parse)
        bad = [c["text"] for c, ids in zip(sub, ours) if ids != c["ids"]]
        assert not bad, f"{len(bad)} differ, first: {bad[0]!r}"


def test_lithe_honours_lstrip_rstrip(exported_vocabs, tmp_path):
    """Added tokens with lstrip/rstrip (Phi-3's tokenizer.json marks some): the whitespace they
    swallow, compared with `tokenizers` on the exported phi-3 file with flags set."""
    j = json.loads((exported_vocabs / "phi-3" / "tokenizer.json").read_text(encoding="utf-8"))
    flags = {"<|end|>": (False, True), "<|assistant|>": (True, False), "<|user|>": (True, True)}
    for a in j["added_tokens"]:
        if a["content"] in flags:
            a["lstrip"], a["rstrip"] = flags[a["content"]]
    path = tmp_path / "phi3-strip.json"
    path.write_text(json.dumps(j), encoding="utf-8")
    hf = tokenizers.Tokenizer.from_file(str(path))
    texts = ["Hi <|end|>  \n next", "x   <|assistant|> y", " <|user|> ", "<|user|>", "a\t<|user|>\tb",
             "<|end|><|end|>", "q\u3000<|assistant|>\u00a0r", "<|user|>\n\n<|assistant|>\n<|end|>"]
    ours = lithe_encode_batch(path, texts, parse_special=True)
    for text, ids in zip(texts, ours):
        assert ids == hf.encode(text, add_special_tokens=False).ids, text
