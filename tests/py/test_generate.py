"""generate / chat / perplexity / bench through the CLI on the default model, and the bad inputs
a user can give them."""
import json
import subprocess

import gguf
import numpy as np
import pytest

from conftest import LITHE, ROOT, run_json, run_lithe

LLAMACPP = json.loads((ROOT / "tests/data/model/llamacpp_q4_1.json").read_text())


def test_greedy_generation_is_deterministic_and_reports_timings(default_model):
    a = run_json("generate", "-m", default_model, "-p", "The capital of France is", "-n", "12", "--temp", "0",
                 "--json")
    b = run_json("generate", "-m", default_model, "-p", "The capital of France is", "-n", "12", "--temp", "0",
                 "--json")
    assert a["ids"] == b["ids"] and len(a["ids"]) == 12 and a["finish_reason"] == "length"
    assert "Paris" in a["text"]
    t = a["timings"]
    assert t["prompt_tokens"] == len(a["prompt_ids"]) and t["generate_tokens_per_second"] > 0


def test_same_seed_same_text_and_stop_strings(default_model):
    args = ["generate", "-m", default_model, "-p", "Once upon a time", "-n", "24", "--temp", "0.9", "--json"]
    a = run_json(*args, "--seed", "7")
    b = run_json(*args, "--seed", "7")
    assert a["text"] == b["text"] and a["seed"] == 7
    greedy = run_json("generate", "-m", default_model, "-p", "1, 2, 3, 4,", "-n", "20", "--temp", "0", "--json")
    assert " 7" in greedy["text"]
    stopped = run_json("generate", "-m", default_model, "-p", "1, 2, 3, 4,", "-n", "20", "--temp", "0",
                       "--stop", " 7", "--json")
    assert stopped["finish_reason"] == "stop"
    assert stopped["text"] == greedy["text"][: greedy["text"].index(" 7")]


def test_prompt_longer_than_context_is_a_clear_error(default_model):
    p = run_lithe("generate", "-m", default_model, "-p", "word " * 300, "-n", "4", "--ctx", "64", check=False)
    assert p.returncode == 1 and "context" in p.stderr and "--ctx" in p.stderr


def test_chat_keeps_the_conversation(default_model):
    # Full precision: greedy Q4_1 answers this system prompt with "L'Étoile, la Marseillaise..."
    # (llama.cpp gives the same 20 tokens), the f32 weights answer it correctly.
    p = subprocess.run([str(LITHE), "chat", "-m", default_model, "--temp", "0", "-n", "24", "--dequantize"],
                       input="What is the capital of France?\nAnd of Italy?\n/exit\n", capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Paris" in p.stdout and "Rome" in p.stdout


def write_gguf(path, arch="llama", bad_shape=False, drop=None):
    """A copy of the default model's metadata and tensors with one thing changed."""
    r = gguf.GGUFReader(str(ROOT / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    w = gguf.GGUFWriter(str(path), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            et = f.types[1]
            vals = [bytes(f.parts[i]).decode() if et == gguf.GGUFValueType.STRING else f.parts[i].tolist()[0]
                    for i in f.data]
            w.add_key_value(key.replace("llama.", arch + "."), vals, vt, sub_type=et)
        elif vt == gguf.GGUFValueType.STRING:
            w.add_key_value(key.replace("llama.", arch + "."), bytes(f.parts[f.data[0]]).decode(), vt)
        else:
            w.add_key_value(key.replace("llama.", arch + "."), f.parts[f.data[0]].tolist()[0], vt)
    for t in r.tensors:
        if t.name == drop:
            continue
        data = np.asarray(t.data)  # quantized tensors come as [rows, bytes]: the writer infers the shape
        if bad_shape and t.name == "blk.0.attn_norm.weight":
            data = np.zeros(500, dtype=np.float32)
        w.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("case,needle", [
    ({"arch": "gpt9"}, "unknown architecture 'gpt9'"),
    ({"bad_shape": True}, "blk.0.attn_norm.weight"),
    ({"drop": "blk.3.ffn_up.weight"}, "blk.3.ffn_up.weight"),
])
def test_bad_models_are_named(tmp_path, case, needle):
    path = tmp_path / "bad.gguf"
    write_gguf(path, **case)
    p = run_lithe("generate", "-m", path, "-p", "hi", "-n", "1", check=False)
    assert p.returncode == 1 and needle in p.stderr, p.stderr


def test_perplexity_llamacpp_protocol_matches_llama_cpp(default_model):
    want = LLAMACPP["perplexity"]
    j = run_json("perplexity", "-m", default_model, "-f", ROOT / "data/sotu-eval.txt", "--protocol", "llamacpp",
                 "--max-windows", str(want["windows"]), "--json")
    assert j["windows"] == want["windows"] and j["ctx"] == 512 and j["tokens"] == want["tokens"]
    assert j["text_tokens"] == want["text_tokens"]
    rel = abs(j["ppl"] - want["ppl"]) / want["ppl"]
    print(f"lithe {j['ppl']:.4f} vs llama.cpp {want['ppl']:.4f}: {100 * rel:.3f}%")
    assert rel < 0.005


def test_perplexity_kld_against_itself_is_zero(default_model, tmp_path):
    base = tmp_path / "base.kld"
    a = run_json("perplexity", "-m", default_model, "-f", ROOT / "data/sotu-eval.txt", "--ctx", "128",
                 "--max-windows", "2", "--save-logits", base, "--json")
    b = run_json("perplexity", "-m", default_model, "-f", ROOT / "data/sotu-eval.txt", "--ctx", "128",
                 "--max-windows", "2", "--kld", base, "--json")
    assert a["tokens"] == 2 * 127 and a["ppl"] == pytest.approx(b["ppl"])
    assert b["kld"]["mean"] < 1e-4 and b["kld"]["top1_agreement"] > 0.99
    assert abs(b["kld"]["delta_ppl"]) < 1e-2 * a["ppl"]


def test_perplexity_on_hostile_text(default_model, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe not utf-8 \xc3\x28 " * 200)
    j = run_json("perplexity", "-m", default_model, "-f", bad, "--ctx", "64", "--json")
    assert j["windows"] >= 1 and j["ppl"] > 1
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    p = run_lithe("perplexity", "-m", default_model, "-f", empty, check=False)
    assert p.returncode == 1 and "fewer than one window" in p.stderr
    p = run_lithe("perplexity", "-m", default_model, "-f", tmp_path / "missing.txt", check=False)
    assert p.returncode == 1 and "missing.txt" in p.stderr


def test_bench_reports_both_phases(default_model):
    j = run_json("bench", "-m", default_model, "-p", "64", "-n", "8", "-r", "2", "--json")
    assert j["prompt_tokens_per_second"]["median"] > 0 and j["gen_tokens_per_second"]["median"] > 0
    assert len(j["prompt_runs"]) == 2 and j["peak_rss_mib"] > 50 and j["decode_gb_per_second"] > 0


def test_hf_checkpoint_runs_like_the_gguf(default_model, tmp_path):
    """A checkpoint directory (HF layout: un-permuted q/k, rotate-half RoPE, safetensors) gives the
    same greedy tokens as the GGUF it was exported from, both in full precision."""
    out = tmp_path / "hf"
    run_lithe("export", "-m", default_model, "-o", out, "--dtype", "f32")
    args = ["-p", "The President of the United States", "-n", "16", "--temp", "0", "--json"]
    a = run_json("generate", "-m", default_model, "--dequantize", *args)
    b = run_json("generate", "-m", out, *args)
    assert a["prompt_ids"] == b["prompt_ids"] and a["ids"] == b["ids"], (a["text"], b["text"])


def test_f16_kv_cache_generates_the_same_greedy_text(default_model):
    args = ["generate", "-m", default_model, "-p", "The capital of France is", "-n", "8", "--temp", "0", "--json"]
    assert run_json(*args, "--kv-type", "f16")["ids"][:4] == run_json(*args)["ids"][:4]
