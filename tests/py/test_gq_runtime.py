"""Compressed checkpoints run packed (issue 7): every format `lithe quantize` writes loads into the
backend's gq kernels without being dequantized, and the perplexity of the default model through
those kernels equals its dequantized reference (`--dequantize`) within 0.1%.

CPU: the SIMD kernels at the default batch. CUDA (LITHE_TEST_CUDA=1 with LITHE_BIN a CUDA build,
on a GPU machine; skipped elsewhere): every kernel a checkpoint meets in use, each against the
dequantized f32 model on the GPU run with as many tokens a forward pass (the other ops then sum
in the same order): 1 (the decode GEMV, fused launches, deferred residual sums), 16 (the GEMV at
its largest batch), 512 (the f16 expansion + cuBLAS), and the Marlin-class GEMM at 1 and 512
tokens (LITHE_GQ_KERNEL=marlin; formats it does not run stay on the GEMV layout).

The one exception is int2: every 2-bit model of this 135M-parameter model is destroyed (perplexity
~450 000 with RTN, ~150 000 with GPTQ), and there perplexity is chaotic in the summation order:
even the packed kernels with exact f32 activations (LITHE_GQ_ACTS=f32) land 0.7% from the
dequantized f32 model (451 803 vs 448 688, measured 2026-11-21). int2 is checked to 2% here and
exactly at the kernel level (tests/unit/test_gq_cpu.cpp, tests/cuda/test_cuda_gq_gemv.cu)."""
import json
import os

import pytest

from conftest import ROOT, run_lithe

CALIB = ROOT / "data" / "sotu-calib.txt"
EVAL = ROOT / "data" / "sotu-eval.txt"
PPL = ["-f", EVAL, "--ctx", "256", "--max-windows", "2", "--json"]

# (name, quantize arguments): every bit width, sym/asym, groups 32/64/128 (576 = 4.5 x 128: a short
# last group) and per channel, GPTQ act-order (a column permutation), SparseGPT 2:4 + int4 (g64; g128
# is also the Marlin GEMM's 2:4).
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
    ("sparsegpt-2:4-int4-g128", ["--method", "sparsegpt", "--nm", "2:4", "--quantize-sparse", "--bits", "4",
                                 "--group", "128", "--partial-groups"]),
]
ARGS = dict(FORMATS)

# (name, perplexity arguments, environment) of the CUDA runs.
CUDA_RUNS = [
    ("gemv-m1", ["--batch", "1"], {}),
    ("gemv-m16", ["--batch", "16"], {}),
    ("expand-m512", ["--batch", "512"], {}),
    ("marlin-m1", ["--batch", "1"], {"LITHE_GQ_KERNEL": "marlin"}),
    ("marlin-m512", ["--batch", "512"], {"LITHE_GQ_KERNEL": "marlin"}),
]
cuda_only = pytest.mark.skipif(os.environ.get("LITHE_TEST_CUDA") != "1",
                               reason="CUDA: set LITHE_TEST_CUDA=1 and LITHE_BIN to a CUDA build on a GPU machine")


@pytest.fixture(scope="module")
def checkpoint(default_model, tmp_path_factory):
    """name -> the default model quantized in that format (made once per module)."""
    made = {}

    def get(name):
        if name not in made:
            out = tmp_path_factory.mktemp("gq") / name.replace(":", "")
            run_lithe("quantize", "-m", default_model, "-o", out, "--calib", CALIB, "--nsamples", "2", "--seqlen", "64",
                      *ARGS[name])
            made[name] = out
        return made[name]
    return get


def ppl(model, *extra, env=None):
    """Perplexity of model; asserts it ran packed where --dequantize is not asked for (no "dequantized at
    load" warning: LITHE_LOG=warn shows warnings)."""
    p = run_lithe("perplexity", "-m", model, *PPL, *extra, env=env)
    if "--dequantize" not in extra:
        assert "dequantized" not in p.stderr, p.stderr
    return json.loads(p.stdout)["ppl"]


def assert_close(name, packed, ref, run="cpu"):
    assert abs(packed - ref) / ref < TOLERANCE.get(name, 1e-3), (name, run, packed, ref)


@pytest.mark.parametrize("name", ARGS)
def test_packed_kernels_give_the_dequantized_perplexity(checkpoint, name):
    out = checkpoint(name)
    assert_close(name, ppl(out), ppl(out, "--dequantize"))


@pytest.fixture(scope="module")
def cuda_reference(checkpoint):
    """(name, perplexity arguments) -> the perplexity of that checkpoint dequantized to f32 on the GPU,
    run the same way (the same tokens per forward pass: the other ops sum in the same order)."""
    refs = {}

    def get(name, extra):
        key = (name, *extra)
        if key not in refs:
            refs[key] = ppl(checkpoint(name), "--device", "cuda", "--dequantize", *extra)
        return refs[key]
    return get


@cuda_only
@pytest.mark.parametrize("run,extra,env", CUDA_RUNS, ids=[r[0] for r in CUDA_RUNS])
@pytest.mark.parametrize("name", ARGS)
def test_cuda_kernels_give_the_dequantized_perplexity(checkpoint, cuda_reference, name, run, extra, env):
    packed = ppl(checkpoint(name), "--device", "cuda", *extra, env=env)
    ref = cuda_reference(name, extra)
    print(f"\nppl {name} {run} {packed:.6f} dequantized {ref:.6f} (at 512: {cuda_reference(name, ['--batch', '512']):.6f})")
    assert_close(name, packed, ref, run)
