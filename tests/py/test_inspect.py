"""`lithe inspect` against the gguf package's own reader (an independent implementation)."""
import gguf
import numpy as np
import pytest

from conftest import run_json, run_lithe


def scalar(field):
    """The Python value of a scalar or string GGUF field, as gguf-py stores it."""
    t = field.types[0]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def test_inspect_json_matches_gguf_reader(lithe_bin, default_model):
    j = run_json("inspect", "--json", default_model)
    r = gguf.GGUFReader(str(default_model))
    assert j["format"] == "gguf" and j["format_version"] == "v3"
    assert j["tensor_count"] == len(r.tensors) == 272
    ours = {t["name"]: t for t in j["tensors"]}
    for t in r.tensors:
        o = ours[t.name]
        assert o["shape"] == [int(x) for x in reversed(t.shape)], t.name
        assert o["dtype"] == t.tensor_type.name.lower(), t.name
        assert o["bytes"] == int(t.n_bytes), t.name
    checked = 0
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        want = scalar(field)
        got = j["metadata"][key]
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-7), key
        else:
            assert got == want, key
        checked += 1
    assert checked >= 25
    tokens = j["metadata"]["tokenizer.ggml.tokens"]
    assert tokens["count"] == 49152 and tokens["elem_type"] == "string"
    assert j["parameter_count"] == sum(int(np.prod(t.shape)) for t in r.tensors)


def test_inspect_text_and_errors(lithe_bin, default_model, tmp_path):
    out = run_lithe("inspect", default_model).stdout
    assert "272 tensors" in out and "blk.0.attn_q.weight" in out and "q4_1" in out
    missing = run_lithe("inspect", tmp_path / "nope.gguf", check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(default_model.read_bytes()[:5000])
    p = run_lithe("inspect", bad, check=False)
    assert p.returncode == 1 and "bad.gguf" in p.stderr, p.stderr
