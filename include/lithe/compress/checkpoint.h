// The lithe compressed checkpoint: a Hugging Face-style directory holding a model whose linear
// layers were quantized (RTN/GPTQ) and/or pruned (SparseGPT, magnitude); its bit packing and the
// reader that dequantizes one linear back to a dense matrix (Model::load uses it:
// dequantize-on-load). The writers (write_lithe_checkpoint, export_gptq for the AutoGPTQ "gptq"
// v1 layout below) are in models/compressed_export.h: they reuse the models' HF export.
//
// Directory (written to a temporary sibling, then renamed into place):
//   config.json             the source model's HF config plus "quantization_config":
//                           {"quant_method": "lithe", "format_version": 1, "method": "gptq"|"rtn"|
//                            "sparsegpt"|..., "bits", "group_size" (-1 = per row), "sym", "desc_act",
//                            "static_groups", "sparsity", "n_m": "2:4"|null, "calibration": {...}}
//   generation_config.json, tokenizer files (copied/exported as `lithe export --format hf` does)
//   model.safetensors       (sharded past 4 GiB) every tensor that is not compressed, as f16 (or
//                           f32), under its HF name; and for each compressed linear <L>
//                           (e.g. model.layers.0.self_attn.q_proj), n_out x n_in, G groups:
//     <L>.qweight  I32 [n_out][ceil(n_in*bits/32)]  each row's codes (original column order) as one
//                  LSB-first bit stream: code c occupies stream bits [c*bits, (c+1)*bits), stream
//                  bit k is bit k%32 of word k/32. For 2/4/8 bits this is 32/bits codes per word,
//                  code c in bits (c%per)*bits of word c/per; 3-bit codes may straddle words.
//     <L>.qzeros   I32 [G][ceil(n_out*bits/32)]     integer zero points, the same bit stream along
//                  n_out (stored as is - not minus 1 - and also for symmetric grids)
//     <L>.scales   F16 (or F32) [G][n_out]            (GPTQ orientation)
//     <L>.g_idx    I32 [n_in]                         group of each input column
//     <L>.mask     U8  [n_out][ceil(n_in/8)]          only when pruned: bit c%8 of byte c/8 of a row
//                  is 1 when weight (row, c) is kept
//   W[r][c] = scales[g][r] * (code[r][c] - zero[g][r]) with g = g_idx[c], then 0 where mask is 0.
//   A pruned but unquantized linear is stored dense as <L>.weight (pruned entries 0) plus <L>.mask.
//
// AutoGPTQ export (export_gptq, bits 4 or 8; AutoGPTQ / GPTQModel "gptq" checkpoint_format v1):
//   <L>.qweight  I32 [n_in*bits/32][n_out]  word (i, o) holds codes of rows i*per .. i*per+per-1
//                (input index), column o, code j of the word in bits j*bits (per = 32/bits)
//   <L>.qzeros   I32 [G][n_out*bits/32]     word (g, w) holds (zero - 1) & maxq of outputs
//                w*per .. w*per+per-1, output j of the word in bits j*bits
//   <L>.scales   F16 [G][n_out];  <L>.g_idx I32 [n_in];  quantize_config.json; config.json with
//   quantization_config (quant_method "gptq"). A reader adds 1 to each unpacked zero, so a zero
//   point of 0 cannot be stored: such a checkpoint is refused.
#pragma once

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lithe/compress/rtn.h"
#include "lithe/core/status.h"
#include "lithe/core/tensor.h"
#include "lithe/formats/model_file.h"
#include "lithe/kernels/group_quant.h"

namespace lithe::compress {

// One compressed linear layer, in HF layout (rows = output features; a GGUF source's q/k rows
// must already be un-permuted - the writer refuses q/k of a GGUF model that permutes them).
struct CompressedLinear {
  std::string hf_name;                // "model.layers.0.self_attn.q_proj" (no ".weight")
  std::optional<QuantizedMatrix> q;   // the quantized weights, or none when only pruned
  std::vector<uint8_t> mask;          // [n_out][n_in], 1 = kept; empty when dense
  std::vector<float> dense_f32;       // [n_out][n_in] pruned weights when q is none
  int64_t n_out = 0, n_in = 0;        // shape (needed when q is none)
};

struct CalibrationInfo {
  std::string file;
  int64_t nsamples = 0, seqlen = 0;
  uint64_t seed = 0;
  int64_t sink_tokens = 0;  // first tokens of each window left out of the Hessians
};

struct CompressionInfo {
  std::string method = "gptq";  // gptq | rtn | sparsegpt | magnitude
  int bits = 4;                 // 0 when not quantized
  int64_t group = 0;            // 0 = per row (written as group_size -1)
  bool sym = false, act_order = false, static_groups = false;
  double sparsity = 0;          // unstructured fraction pruned
  int64_t n = 0, m = 0;         // n:m pruning (0 = none)
  std::optional<CalibrationInfo> calibration;
};

// ---- bit packing (the stream layout above) ----
int64_t packed_words(int64_t count, int bits);  // ceil(count * bits / 32)
// rows x cols codes (each < 2^bits) -> rows x packed_words(cols, bits) words.
std::vector<int32_t> pack_rows(std::span<const uint8_t> codes, int64_t rows, int64_t cols, int bits);
std::vector<uint8_t> unpack_rows(std::span<const int32_t> words, int64_t rows, int64_t cols, int bits);
// Bitmask [rows][ceil(cols/8)] <-> one byte (0/1) per weight.
std::vector<uint8_t> pack_mask(std::span<const uint8_t> mask, int64_t rows, int64_t cols);
std::vector<uint8_t> unpack_mask(std::span<const uint8_t> bits, int64_t rows, int64_t cols);

// config.json's "quantization_config" for `info`.
nlohmann::json quantization_config_json(const CompressionInfo& info);

// config.json's quantization_config (null json when absent).
const nlohmann::json& quantization_config(const ModelFile& f);
// quant_method of f's config.json quantization_config ("lithe", "gptq"), empty when none.
std::string quant_method(const ModelFile& f);
// The QuantizedMatrix stored for linear `hf_name` in a "lithe" or "gptq" checkpoint (scales as
// stored, widened to f32; codes in original column order). not_found when <hf_name>.qweight is absent.
Result<QuantizedMatrix> read_quantized_linear(const ModelFile& f, const std::string& hf_name);
// Its dense weight [n_out][n_in] in `out` (f32 or f16): dequantize(q), masked when a mask is stored.
Result<Tensor> read_compressed_linear(const ModelFile& f, const std::string& hf_name, DType out = DType::f32);

// The runtime (gq) form of a quantized matrix: group = n_in for a per-row grid; columns sorted by
// group when g_idx is not i / group (act-order: perm records the order); scales rounded to f16;
// pruned weights (mask [n_out][n_in], 0 = pruned; may be empty) get their group's zero point as
// code, and the format is marked 2:4 when the result has that pattern. unsupported (naming the
// shape) when the groups cannot be made contiguous and whole, or a zero point is not an integer code.
Result<gq::Matrix> to_runtime(const QuantizedMatrix& q, std::span<const uint8_t> mask);
// to_runtime of linear `hf_name` of a "lithe" or "gptq" checkpoint, with its mask when stored.
Result<gq::Matrix> read_runtime_linear(const ModelFile& f, const std::string& hf_name);

// A host tensor of `dtype` and `shape` holding a copy of `v` (sizes must agree).
template <typename T>
Result<Tensor> host_tensor(DType dtype, const Shape& shape, const std::vector<T>& v) {
  LITHE_ASSIGN(Tensor t, Tensor::empty(dtype, shape));
  if (t.nbytes() != v.size() * sizeof(T))
    return error(StatusCode::internal, "tensor of shape {} needs {} bytes, have {}", shape_str(shape), t.nbytes(),
                 v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t.data(), v.data(), t.nbytes());
  return t;
}

}  // namespace lithe::compress
