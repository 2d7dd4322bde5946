"""`lithe quantize` end to end on the default model (GGUF: q/k rows are un-permuted into the HF
layout on write), the checkpoint it writes loading and generating, `export --format gptq`, and
the bad inputs: an existing output, a group size that does not divide the widths, bad --nm; and on
the tiny test model, the calibration activations spilled to disk give the same checkpoint as in
host memory."""
import json
import shutil
import struct

import numpy as np

from conftest import ROOT, run_lithe

CALIB = ROOT / "data" / "sotu-calib.txt"
PROMPT = ["-p", "The capital of France is", "-n", "8", "--temp", "0", "--json"]


def quantize(model, out, *args, check=True):
    return run_lithe("quantize", "-m", model, "-o", out, "--calib", CALIB, "--nsamples", "2", "--seqlen", "64", *args,
                     check=check)


def test_rtn8_checkpoint_matches_the_dequantized_model(default_model, tmp_path):
    out = tmp_path / "rtn8"
    p = quantize(default_model, out, "--method", "rtn", "--bits", "8", "--group", "64")
    assert "8.500 bits per weight" in p.stdout, p.stdout
    cfg = json.loads((out / "config.json").read_text())
    qc = cfg["quantization_config"]
    assert (qc["quant_method"], qc["bits"], qc["group_size"]) == ("lithe", 8, 64)
    # 8-bit RTN barely moves greedy text: the first tokens agree with the f32 model.
    base = json.loads(run_lithe("generate", "-m", default_model, "--dequantize", *PROMPT).stdout)
    got = json.loads(run_lithe("generate", "-m", out, *PROMPT).stdout)
    assert got["ids"][:4] == base["ids"][:4], (got["text"], base["text"])
    # The AutoGPTQ export loads and gives the same greedy text.
    run_lithe("export", "-m", out, "-o", tmp_path / "gptq", "--format", "gptq")
    assert json.loads((tmp_path / "gptq" / "quantize_config.json").read_text())["bits"] == 8
    again = json.loads(run_lithe("generate", "-m", tmp_path / "gptq", *PROMPT).stdout)
    assert again["ids"] == got["ids"]


def test_gptq_and_sparsegpt_write_what_they_claim(default_model, tmp_path):
    from safetensors.numpy import load_file
    out = tmp_path / "gptq4"
    p = quantize(default_model, out, "--method", "gptq", "--bits", "4", "--group", "64", "--sym")
    assert "rel. error" in p.stdout
    t = load_file(str(out / "model.safetensors"))
    qw = t["model.layers.0.self_attn.q_proj.qweight"]
    assert qw.dtype == np.int32 and qw.shape == (576, 576 * 4 // 32)
    assert t["model.layers.0.self_attn.q_proj.scales"].shape == (576 // 64, 576)
    sp = tmp_path / "sp24"
    quantize(default_model, sp, "--method", "sparsegpt", "--nm", "2:4")
    m = load_file(str(sp / "model.safetensors"))
    w = m["model.layers.3.mlp.down_proj.weight"].astype(np.float32)
    groups = (w.reshape(w.shape[0], -1, 4) == 0).sum(axis=2)
    assert (groups >= 2).all()
    run_lithe("generate", "-m", sp, *PROMPT)


def test_bad_inputs_are_clear_errors(default_model, tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    p = quantize(default_model, out, "--method", "rtn", check=False)
    assert p.returncode != 0 and "--force" in p.stderr
    p = quantize(default_model, tmp_path / "y", "--method", "gptq", "--group", "100", check=False)
    assert p.returncode != 0 and "100" in p.stderr and "576" in p.stderr, p.stderr
    p = quantize(default_model, tmp_path / "z", "--method", "sparsegpt", "--nm", "4:2", check=False)
    assert p.returncode != 0 and "4:2" in p.stderr, p.stderr
    p = run_lithe("quantize", "-m", default_model, "-o", tmp_path / "w", "--calib", CALIB, "--nsamples", "1",
                  "--seqlen", "5000000", "--group", "64", check=False)
    assert p.returncode != 0 and "too few" in p.stderr, p.stderr
    assert not (tmp_path / "y").exists() and not (tmp_path / "z").exists()


def tiny_model(tmp_path):
    """The tiny llama checkpoint with the test tokenizer, in one directory."""
    d = tmp_path / "tiny"
    d.mkdir()
    for sub in ("llama3", "tokenizer"):
        for f in (ROOT / "tests" / "data" / "tiny" / sub).iterdir():
            shutil.copy(f, d / f.name)
    return d


def safetensors_bytes(path):
    """{name: (dtype, shape, raw bytes)} of a .safetensors file, read without the safetensors package."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def test_activations_on_disk_give_the_same_checkpoint(tmp_path):
    tiny = tiny_model(tmp_path)
    calib = tmp_path / "calib.txt"
    calib.write_text(CALIB.read_text()[:20000])
    got = {}
    for where in ("host", "disk"):
        out = tmp_path / where
        p = run_lithe("quantize", "-m", tiny, "-o", out, "--calib", calib, "--nsamples", "4", "--seqlen", "48",
                      "--method", "gptq", "--group", "16", "--activations", where)
        assert f"({where})" in p.stdout, p.stdout
        files = sorted(out.glob("*.safetensors"))
        assert files
        got[where] = {f.name: safetensors_bytes(f) for f in files}
    assert got["disk"] == got["host"]
    # The spill file never shows up next to the output.
    assert sorted(f.name for f in tmp_path.iterdir()) == ["calib.txt", "disk", "host", "tiny"]
    p = run_lithe("quantize", "-m", tiny, "-o", tmp_path / "bad", "--calib", calib, "--activations", "bogus",
                  check=False)
    assert p.returncode != 0 and "'bogus'" in p.stderr and "host or disk" in p.stderr, p.stderr
    assert not (tmp_path / "bad").exists()
