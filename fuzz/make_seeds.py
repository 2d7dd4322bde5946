#!/usr/bin/env python3
"""Small valid inputs for the libFuzzer targets, one folder per target:
  <out>/fuzz_gguf/*.gguf              written with gguf.GGUFWriter (every metadata type, plain and
                                      block tensors, a custom alignment, no tensors)
  <out>/fuzz_safetensors/*.safetensors written with the reference safetensors serializer
  <out>/fuzz_hf_config/*.json         Llama-family config.json files
The committed copies live in fuzz/seeds/; scripts/fuzz.sh regenerates them when the python
packages (gguf, safetensors, numpy) are importable.

Run: python fuzz/make_seeds.py [out_dir]   (default: fuzz/seeds)
"""
import json
import pathlib
import sys
import tempfile

import numpy as np


def gguf_seeds(out: pathlib.Path) -> None:
    import gguf
    from gguf import GGMLQuantizationType as Q, GGUFValueType as V

    def write(name, fill, alignment=None):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp) / name
            w = gguf.GGUFWriter(path, "llama")
            if alignment:
                w.add_custom_alignment(alignment)
            fill(w)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            (out / name).write_bytes(path.read_bytes())

    def every_type(w):
        w.add_key_value("t.u8", 200, V.UINT8)
        w.add_key_value("t.i8", -100, V.INT8)
        w.add_key_value("t.u16", 60000, V.UINT16)
        w.add_key_value("t.i16", -30000, V.INT16)
        w.add_key_value("t.u32", 4000000000, V.UINT32)
        w.add_key_value("t.i32", -2000000000, V.INT32)
        w.add_key_value("t.f32", 1.5, V.FLOAT32)
        w.add_key_value("t.bool", True, V.BOOL)
        w.add_key_value("t.str", "héllo", V.STRING)
        w.add_key_value("t.u64", 2**63 + 5, V.UINT64)
        w.add_key_value("t.i64", -(2**62), V.INT64)
        w.add_key_value("t.f64", -2.25, V.FLOAT64)
        w.add_array("t.ints", [1, 2, 3])
        w.add_array("t.strs", ["a", "bc", ""])
        w.add_array("t.empty", [])
        w.add_context_length(128)
        w.add_tensor("f32", np.arange(6, dtype=np.float32).reshape(2, 3))
        w.add_tensor("f16", np.array([1.0, -2.0, 0.5, 0.0], dtype=np.float16))
        q8 = np.zeros(34, dtype=np.uint8)  # one q8_0 block: f16 scale + 32 int8
        q8[1] = 0x3C
        q8[2:] = np.arange(32, dtype=np.uint8)
        w.add_tensor("q8", q8, raw_dtype=Q.Q8_0)  # byte shape [34] -> 32 values
        w.add_tensor("i32", np.array([[7, -7]], dtype=np.int32))

    def aligned(w):
        w.add_uint32("general.quantization_version", 2)
        w.add_tensor("a", np.ones((3,), dtype=np.float32))
        w.add_tensor("b", np.ones((2, 2), dtype=np.float32))

    def no_tensors(w):
        w.add_string("general.name", "empty")

    write("every_type.gguf", every_type)
    write("aligned64.gguf", aligned, alignment=64)
    write("no_tensors.gguf", no_tensors)


def safetensors_seeds(out: pathlib.Path) -> None:
    from safetensors import TensorSpec, serialize

    def write(name, arrays, metadata=None):
        specs, keep = {}, []
        for k, (dtype, a) in arrays.items():
            a = np.ascontiguousarray(a)
            keep.append(a)
            specs[k] = TensorSpec(dtype=dtype, shape=list(a.shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
        (out / name).write_bytes(bytes(serialize(specs, metadata=metadata)))

    write("mixed.safetensors", {
        "w": ("float32", np.arange(6, dtype=np.float32).reshape(2, 3)),
        "h": ("float16", np.ones(4, np.float16)),
        "b": ("bfloat16", np.array([0x3F80, 0xC000], np.uint16)),
        "i": ("int64", np.array([1, -1], np.int64)),
        "m": ("bool", np.array([True, False])),
        "s": ("float64", np.array(2.5)),
        "e": ("float32", np.zeros((0, 3), np.float32)),
    }, metadata={"format": "pt"})
    write("one.safetensors", {"x": ("uint8", np.arange(5, dtype=np.uint8))})
    write("empty.safetensors", {})


CONFIGS = {
    "smollm2.json": {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
        "hidden_size": 576, "intermediate_size": 1536, "max_position_embeddings": 8192, "model_type": "llama",
        "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
        "vocab_size": 49152},
    "llama31.json": {
        "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
        "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072, "model_type": "llama",
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "rope_theta": 500000.0, "vocab_size": 128256, "mlp_bias": False, "attention_bias": False},
    "qwen2.json": {
        "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151643,
        "hidden_size": 896, "intermediate_size": 4864, "max_position_embeddings": 32768, "model_type": "qwen2",
        "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "use_sliding_window": True, "tie_word_embeddings": True,
        "vocab_size": 151936},
    "mistral.json": {
        "architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
        "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
        "rope_theta": 10000.0, "sliding_window": None, "vocab_size": 32000, "head_dim": 128},
    "v5_rope_parameters.json": {
        "model_type": "llama", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "dtype": "float32",
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
}


def main() -> None:
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent / "seeds"
    dirs = {t: out / t for t in ("fuzz_gguf", "fuzz_safetensors", "fuzz_hf_config")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    gguf_seeds(dirs["fuzz_gguf"])
    safetensors_seeds(dirs["fuzz_safetensors"])
    for name, cfg in CONFIGS.items():
        (dirs["fuzz_hf_config"] / name).write_text(json.dumps(cfg, indent=1) + "\n")
    for d in dirs.values():
        print(f"{d}: {len(list(d.iterdir()))} seeds")


if __name__ == "__main__":
    main()
