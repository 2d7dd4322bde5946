"""Compressed checkpoints run packed (issue 7): every format `lithe quantize` writes loads into the
backend's gq kernels without being dequantized, and the perplexity of the default model through
those kernels equals its dequantized reference (`--dequantize`) within 0.1%.

The one exception is int2: every 2-bit model of this 135M-parameter model is destroyed (perplexity
~450 000 with RTN, ~150 000 with GPTQ), and there perplexity is chaotic in the summation order:
even the packed kernels with exact f32 activations (LITHE_GQ_ACTS=f32) land 0.7% from the
dequantized f32 model (451 803 vs 448 688, measured 2026-11-21). int2 is checked to 2% here and
exactly at the kernel level (tests/unit/test_gq_cpu.cpp)."""
import json

import pytest

from conftest import ROOT, run_lithe

CALIB = ROOT / "data" / "sotu-calib.txt"
EVAL = ROOT / "data" / "sotu-eval.txt"
PPL = ["-f", EVAL, "--ctx", "256", "--max-windows", "2", "--json"]

# (name, quantize arguments): every bit width, sym/asym, groups 32/64/128 (576 = 4.5 x 128: a short
# last group) and per channel, GPTQ act-order (a column permutation), SparseGPT 2:4 + int4.
TOLERANCE = {"int2-g64": 2e-2}
FORMATS = [
    ("int4-g128", ["--method", "rtn", "--bits", "4", "--group", "128", "--partial-groups"]),
    ("int4-g32-sym", ["--method", "rtn", "--bits", "4", "--group", "32", "--sym"]),
    ("int3-g64", ["--method", "rtn", "--bits", "3", "--group", "64"]),
    ("int2-g64", ["--method", "rtn", "--bits", "2", "--group", "64"]),
    ("int8-per-channel", ["--method", "rtn", "--bits", "8", "--group", "0", "--sym"]),
    ("int4-per-channel", ["--method", "rtn", "--bits", "4", "--group", "0"]),
    ("gptq-int4-g128-act-order", ["--method", "gptq", "--bits", "4", "--group", "128", "--partial-groups",
                                  "--act-order"]),
    ("sparsegpt-2:4-int4-g64", ["--method", "sparsegpt", "--nm", "2:4", "--quantize-sparse", "--bits", "4",
                                "--group", "64"]),
]


def ppl(model, *extra):
    return json.loads(run_lithe("perplexity", "-m", model, *PPL, *extra).stdout)["ppl"]


@pytest.mark.parametrize("name,args", FORMATS, ids=[f[0] for f in FORMATS])
def test_packed_kernels_give_the_dequantized_perplexity(default_model, tmp_path, name, args):
    out = tmp_path / name.replace(":", "")
    run_lithe("quantize", "-m", default_model, "-o", out, "--calib", CALIB, "--nsamples", "2", "--seqlen", "64", *args)
    # Packed: no "dequantized at load" warning (LITHE_LOG=warn shows warnings).
    p = run_lithe("perplexity", "-m", out, *PPL)
    assert "dequantized" not in p.stderr, p.stderr
    packed = json.loads(p.stdout)["ppl"]
    ref = ppl(out, "--dequantize")
    assert abs(packed - ref) / ref < TOLERANCE.get(name, 1e-3), (name, packed, ref)
