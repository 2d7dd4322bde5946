#!/usr/bin/env python3
"""Writes tests/data/safetensors/golden.{safetensors,json} with the reference (Rust) safetensors
serializer, for tests/unit/test_safetensors.cpp to read back.

golden.json: {"metadata": {...}, "tensors": {name: {"dtype", "shape", "hex", "values"}}}
  hex:    the tensor's bytes, little-endian, as stored
  values: the elements as numbers (bf16 decoded to float; absent for F8 types, checked by hex)

Run: /tmp/venv/bin/python tests/gen/gen_safetensors_golden.py   (needs numpy + safetensors)
"""
import json
import pathlib

import numpy as np
from safetensors import TensorSpec, serialize

OUT = pathlib.Path(__file__).resolve().parent.parent / "data" / "safetensors"


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns (round to nearest even) as uint16."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return b.astype(np.uint16)


def main() -> None:
    rng = np.random.default_rng(20240611)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    bf_src = rng.standard_normal((2, 4)).astype(np.float32)
    tensors = {
        # name: (safetensors-serializer dtype, array holding the raw little-endian bytes)
        "layer.f32": ("float32", f32),
        "layer.f16": ("float16", np.array([0.0, -1.5, 65504.0, 6.1035156e-05, 2.0**-24, -0.0], np.float16)),
        "layer.bf16": ("bfloat16", bf16_bits(bf_src)),
        "layer.f64": ("float64", np.array([[np.pi, -np.e], [1e300, -1e-300]], np.float64)),
        "ids.i64": ("int64", np.array([0, -1, 2**62, -(2**63), 2**63 - 1], np.int64)),
        "ids.i32": ("int32", np.array([[7, -7, 2**31 - 1]], np.int32)),
        "ids.i16": ("int16", np.array([-32768, 32767, 5], np.int16)),
        "ids.i8": ("int8", np.array([-128, 127, 0, 1], np.int8)),
        "ids.u8": ("uint8", np.array([0, 255, 17], np.uint8)),
        "mask.bool": ("bool", np.array([[True, False], [False, True]], np.bool_)),
        "fp8.e4m3": ("float8_e4m3fn", np.array([0x00, 0x38, 0xB8, 0x7E], np.uint8)),
        "fp8.e5m2": ("float8_e5m2", np.array([0x00, 0x3C, 0xBC, 0x7B], np.uint8)),
        "scalar.f32": ("float32", np.array(3.25, np.float32)),
        "empty.f32": ("float32", np.zeros((0, 4), np.float32)),
    }
    st_names = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64", "int64": "I64",
                "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL",
                "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
    specs, expected = {}, {}
    for name, (dtype, arr) in tensors.items():
        arr = np.ascontiguousarray(arr)
        specs[name] = TensorSpec(dtype=dtype, shape=list(arr.shape), data_ptr=arr.ctypes.data, data_len=arr.nbytes)
        if dtype == "bfloat16":
            values = (arr.astype(np.uint32) << 16).view(np.float32).tolist()
        elif dtype.startswith("float8"):
            values = None
        else:
            values = arr.tolist()
        entry = {"dtype": st_names[dtype], "shape": list(arr.shape), "hex": arr.tobytes().hex()}
        if values is not None:
            entry["values"] = np.asarray(values).reshape(-1).tolist() if arr.ndim else [values]
        expected[name] = entry
    metadata = {"format": "np", "source": "tests/gen/gen_safetensors_golden.py"}
    data = bytes(serialize(specs, metadata=metadata))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "golden.safetensors").write_bytes(data)
    with open(OUT / "golden.json", "w") as f:
        json.dump({"metadata": metadata, "tensors": expected}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT / 'golden.safetensors'} ({len(data)} bytes) and golden.json")


if __name__ == "__main__":
    main()
