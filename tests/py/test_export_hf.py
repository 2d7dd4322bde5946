"""`lithe export --format hf` against independent code: every tensor of the default model,
dequantized by lithe, equals the gguf package's numpy dequantization (after undoing llama.cpp's
q/k row permutation), and the directory has what transformers needs."""
import json

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize
from safetensors.numpy import load_file

from conftest import run_lithe

HF_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    _, layer, rest = name.split(".", 2)
    return f"model.layers.{layer}.{HF_NAMES[rest]}"


def unpermute(w, n_head):
    """Inverse of llama.cpp convert_hf_to_gguf.py's permute(): GGUF interleaved -> HF rotate-half rows."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def exported_f32(lithe_bin, default_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("exp") / "smollm2-f32"
    run_lithe("export", "-m", default_model, "-o", out, "--format", "hf", "--dtype", "f32")
    return out


def test_every_tensor_matches_gguf_numpy_dequantization(default_model, exported_f32):
    r = gguf.GGUFReader(str(default_model))
    ours = load_file(str(exported_f32 / "model.safetensors"))
    assert len(ours) == len(r.tensors) == 272
    worst = 0.0
    for t in r.tensors:
        ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            ref = unpermute(ref, 9)
        elif t.name.endswith("attn_k.weight"):
            ref = unpermute(ref, 3)
        got = ours[hf_name(t.name)]
        assert got.dtype == np.float32 and got.shape == ref.shape, t.name
        diff = float(np.max(np.abs(got - ref))) if ref.size else 0.0
        worst = max(worst, diff)
        assert diff == 0.0, f"{t.name}: max abs diff {diff}"
    print(f"max abs difference over all {len(r.tensors)} tensors: {worst}")


def test_config_and_generation_config(exported_f32):
    cfg = json.loads((exported_f32 / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLM"]
    assert cfg["hidden_size"] == 576 and cfg["intermediate_size"] == 1536
    assert cfg["num_hidden_layers"] == 30 and cfg["num_attention_heads"] == 9
    assert cfg["num_key_value_heads"] == 3 and cfg["vocab_size"] == 49152
    assert cfg["tie_word_embeddings"] is True and cfg["rope_theta"] == 100000.0
    assert cfg["rms_norm_eps"] == pytest.approx(1e-5)
    gen = json.loads((exported_f32 / "generation_config.json").read_text())
    assert gen["bos_token_id"] == 1 and gen["eos_token_id"] == 2


def test_f16_export_is_rounded_f32(default_model, exported_f32, tmp_path):
    out = tmp_path / "f16"
    run_lithe("export", "-m", default_model, "-o", out, "--dtype", "f16")
    a = load_file(str(out / "model.safetensors"))
    b = load_file(str(exported_f32 / "model.safetensors"))
    for name in ("model.layers.3.self_attn.k_proj.weight", "model.norm.weight", "model.embed_tokens.weight"):
        assert a[name].dtype == np.float16
        np.testing.assert_array_equal(a[name], b[name].astype(np.float16))
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float16"


def test_existing_output_is_refused_and_left_intact(default_model, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    p = run_lithe("export", "-m", default_model, "-o", out, check=False)
    assert p.returncode == 1 and "already exists" in p.stderr and "--force" in p.stderr
    assert (out / "keep.txt").read_text() == "mine"
    bad = run_lithe("export", "-m", default_model, "-o", tmp_path / "x", "--dtype", "q4_0", check=False)
    assert bad.returncode == 1 and "q4_0" in bad.stderr
    assert not (tmp_path / "x").exists()
