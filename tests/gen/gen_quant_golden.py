#!/usr/bin/env python3
"""Golden files for lithe's reference (de)quantizers (tests/unit/test_ggml_quants.cpp).

The independent reference is the numpy implementation in the PyPI `gguf` package
(gguf.quants.dequantize / gguf.quants.quantize, maintained with llama.cpp). Where gguf has no
implementation, a few lines of numpy here follow ggml's definition instead:
  q8_1  gguf-py's size table says 40 bytes (an old layout with f32 d and s); ggml's current
        block_q8_1 is f16 d, f16 s, int8 qs[32] = 36 bytes. Value j = f32(d) * qs[j].
  q8_k  value j = d * qs[j] with d an f32 (gguf-py has no Q8_K class).
  f64, i8, i16, i32   numpy astype(float32).

Usage:  /tmp/venv/bin/python tests/gen/gen_quant_golden.py [--out tests/data/quants]

Two kinds of file, both in one tiny little-endian format:

    magic   4 bytes        b"LQG1"
    n       u32            number of values
    nbytes  u32            number of encoded bytes
    flags   u32            bit 0: the source floats follow
    src     f32[n]         (only when flags & 1) the floats gguf quantized into `raw`
    raw     u8[nbytes]     the encoded row of n values
    want    f32[n]         the reference dequantization of `raw`

  <type>.bin      raw = random bytes (the f16/f32 scale fields overwritten with finite values
                  of mixed sign and magnitude, some subnormal); no src.
  <type>_q.bin    raw = gguf.quants.quantize(src) for the types gguf can quantize (f16, bf16,
                  q4_0, q4_1, q5_0, q5_1, q8_0); src = random normal data with outliers.

The C++ test requires bit-exact equality of lithe's dequantize_row with `want`, and for
<type>_q.bin compares lithe's own quantization error of src with gguf's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import struct
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

SEED = 20240611

# name -> (gguf type or None, block elems, block bytes, [(offset, kind)] scale fields to sanitise)
# kind: "f16" = an f16 scale, "f32" = an f32 scale.
BLOCK_TYPES = {
    "q4_0": (T.Q4_0, 32, 18, [(0, "f16")]),
    "q4_1": (T.Q4_1, 32, 20, [(0, "f16"), (2, "f16")]),
    "q5_0": (T.Q5_0, 32, 22, [(0, "f16")]),
    "q5_1": (T.Q5_1, 32, 24, [(0, "f16"), (2, "f16")]),
    "q8_0": (T.Q8_0, 32, 34, [(0, "f16")]),
    "q8_1": (None, 32, 36, [(0, "f16"), (2, "f16")]),
    "q2_k": (T.Q2_K, 256, 84, [(80, "f16"), (82, "f16")]),
    "q3_k": (T.Q3_K, 256, 110, [(108, "f16")]),
    "q4_k": (T.Q4_K, 256, 144, [(0, "f16"), (2, "f16")]),
    "q5_k": (T.Q5_K, 256, 176, [(0, "f16"), (2, "f16")]),
    "q6_k": (T.Q6_K, 256, 210, [(208, "f16")]),
    "q8_k": (None, 256, 292, [(0, "f32")]),
}
LEGACY_BLOCKS = 6  # blocks per file for the 32-value types
K_BLOCKS = 4       # blocks per file for the 256-value types (all files together stay < 50 KB)


def write(path: Path, raw: bytes, want: np.ndarray, src: np.ndarray | None = None) -> None:
    want = np.ascontiguousarray(want, dtype="<f4").ravel()
    n = want.size
    with open(path, "wb") as f:
        f.write(b"LQG1")
        f.write(struct.pack("<III", n, len(raw), 1 if src is not None else 0))
        if src is not None:
            src = np.ascontiguousarray(src, dtype="<f4").ravel()
            assert src.size == n
            f.write(src.tobytes())
        f.write(raw)
        f.write(want.tobytes())


def sane_scale(rng: np.random.Generator, i: int) -> float:
    """Finite scales of both signs over a wide range; every 5th one is an f16 subnormal."""
    sign = -1.0 if rng.random() < 0.5 else 1.0
    if i % 5 == 4:
        return sign * float(rng.integers(1, 1024)) * 2.0**-24
    return sign * float(2.0 ** rng.uniform(-12, 3))


def random_blocks(rng: np.random.Generator, name: str) -> bytes:
    _, be, bb, fields = BLOCK_TYPES[name]
    nblocks = LEGACY_BLOCKS if be == 32 else K_BLOCKS
    raw = bytearray(rng.integers(0, 256, size=nblocks * bb, dtype=np.uint8).tobytes())
    k = 0
    for b in range(nblocks):
        for off, kind in fields:
            v = sane_scale(rng, k)
            k += 1
            if kind == "f16":
                raw[b * bb + off: b * bb + off + 2] = np.float16(v).tobytes()
            else:
                raw[b * bb + off: b * bb + off + 4] = np.float32(v).tobytes()
    return bytes(raw)


def dequant_block(name: str, raw: bytes) -> np.ndarray:
    qtype, be, bb, _ = BLOCK_TYPES[name]
    data = np.frombuffer(raw, dtype=np.uint8)
    if qtype is not None:
        out = quants.dequantize(data, qtype)
    elif name == "q8_1":
        blocks = data.reshape(-1, bb)
        d = blocks[:, 0:2].copy().view("<f2").astype(np.float32)
        qs = blocks[:, 4:].copy().view(np.int8).astype(np.float32)
        out = qs * d
    elif name == "q8_k":
        blocks = data.reshape(-1, bb)
        d = blocks[:, 0:4].copy().view("<f4")
        qs = blocks[:, 4:4 + 256].copy().view(np.int8).astype(np.float32)
        out = d * qs
    else:
        raise ValueError(name)
    out = np.asarray(out, dtype=np.float32).ravel()
    assert out.size == len(raw) // bb * be
    assert np.all(np.isfinite(out)), name
    return out


def source_data(rng: np.random.Generator, n: int) -> np.ndarray:
    """Normal data, per-block magnitudes varying, a few outliers, one all-zero and one constant block."""
    x = rng.standard_normal(n).astype(np.float32)
    x *= np.repeat(2.0 ** rng.uniform(-4, 2, n // 32), 32).astype(np.float32)
    x[rng.integers(0, n, 3)] *= 20.0
    x[32:64] = 0.0
    x[64:96] = 0.75
    return x


def f16_source(rng: np.random.Generator) -> np.ndarray:
    """Values that exercise f32 -> f16 rounding: normals, subnormals, ties, overflow."""
    parts = [
        rng.standard_normal(64) * 100,
        rng.uniform(-1, 1, 32) * 2.0**-14,                   # subnormal range
        np.array([2.0**-25, 3 * 2.0**-26, 2.0**-24 * 1.5, -2.0**-24 * 2.5, 65504, 65519.99, 65520,
                  -65520, 1e6, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 2.0**-14 - 2.0**-25, 0.0, -0.0,
                  np.inf, -np.inf]),
        rng.uniform(-70000, 70000, 16),
    ]
    x = np.concatenate(parts).astype(np.float32)
    return x


def bf16_source(rng: np.random.Generator) -> np.ndarray:
    bits = rng.integers(0, 2**32, 96, dtype=np.uint64).astype(np.uint32)
    bits[:32] = (bits[:32] & 0xFFFF0000) | 0x8000        # exact ties
    bits[32:40] = (bits[32:40] & 0xFFFF0000) | 0x7FFF    # just below a tie
    x = bits.view(np.float32)
    x = np.where(np.isfinite(x), x, np.float32(1.0))
    return np.concatenate([x, np.array([3.0e38, 3.4e38, -3.4e38, 1e-40, 0.0, -0.0, np.inf, -np.inf],
                                       dtype=np.float32)]).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "data" / "quants"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)

    # --- block types from random bytes ---
    for name in BLOCK_TYPES:
        raw = random_blocks(rng, name)
        write(out / f"{name}.bin", raw, dequant_block(name, raw))

    # --- plain types ---
    n = 64
    f32 = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
    write(out / "f32.bin", f32.tobytes(), f32)
    h = rng.integers(0, 2**16, n, dtype=np.uint64).astype(np.uint16)
    h = np.where((h & 0x7C00) == 0x7C00, h & 0x83FF, h).astype(np.uint16)  # no inf/nan: those are in test_half
    h[:4] = [0x0001, 0x8001, 0x03FF, 0x7BFF]
    write(out / "f16.bin", h.astype("<u2").tobytes(), quants.dequantize(h.view(np.uint8), T.F16))
    b = rng.integers(0, 2**16, n, dtype=np.uint64).astype(np.uint16)
    b = np.where((b & 0x7F80) == 0x7F80, b & 0x807F, b).astype(np.uint16)
    write(out / "bf16.bin", b.astype("<u2").tobytes(), quants.dequantize(b.view(np.uint8), T.BF16))
    f64 = rng.standard_normal(n) * 10.0 ** rng.uniform(-40, 40, n)
    f64[:3] = [1e300, -1e-300, 1.0 + 2.0**-30]
    with np.errstate(over="ignore"):  # 1e300 -> inf, as a C++ double -> float cast on IEEE hardware
        write(out / "f64.bin", f64.astype("<f8").tobytes(), f64.astype(np.float32))
    for name, dt, lo, hi in [("i8", "<i1", -128, 128), ("i16", "<i2", -2**15, 2**15),
                             ("i32", "<i4", -2**31, 2**31)]:
        v = rng.integers(lo, hi, n, dtype=np.int64)
        if name == "i32":
            v[:4] = [2**31 - 1, -2**31, 16777217, 2**24 + 3]
        v = v.astype(dt)
        write(out / f"{name}.bin", v.tobytes(), v.astype(np.float32))

    # --- gguf's own quantizers, from floats ---
    for name, qtype in [("q4_0", T.Q4_0), ("q4_1", T.Q4_1), ("q5_0", T.Q5_0), ("q5_1", T.Q5_1),
                        ("q8_0", T.Q8_0)]:
        src = source_data(rng, 4 * 32)
        raw = quants.quantize(src, qtype).tobytes()
        write(out / f"{name}_q.bin", raw, dequant_block(name, raw), src)
    src = f16_source(rng)
    with np.errstate(over="ignore"):
        raw = quants.quantize(src, T.F16).astype("<f2").tobytes()
    write(out / "f16_q.bin", raw, np.frombuffer(raw, "<f2").astype(np.float32), src)
    src = bf16_source(rng)
    raw = quants.quantize(src, T.BF16).tobytes()
    write(out / "bf16_q.bin", raw, quants.dequantize(np.frombuffer(raw, np.uint8), T.BF16), src)

    total = sum(p.stat().st_size for p in out.glob("*.bin"))
    ver = importlib.metadata.version("gguf")
    print(f"wrote {len(list(out.glob('*.bin')))} files, {total} bytes, to {out} (gguf {ver}, numpy {np.__version__})")


if __name__ == "__main__":
    main()
