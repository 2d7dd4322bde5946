// Element types: plain scalars and packed block types (GGUF/ggml block quantization).
// A block type stores `block_elems` values in `block_bytes` bytes; plain types have block_elems 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "lithe/core/status.h"

namespace lithe {

enum class DType : uint8_t {
  // plain
  f32, f16, bf16, f64, i8, i16, i32, i64, u8, boolean, f8_e4m3, f8_e5m2,
  // ggml block types (layouts in kernels/ref/ggml_blocks.h)
  q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, q2_k, q3_k, q4_k, q5_k, q6_k, q8_k,
  // a packed weight matrix in one backend's layout (core/packed.h: group-quantized runtime
  // formats); its Tensor carries the PackedWeight that describes the bytes
  gq,
};
inline constexpr int kNumDTypes = static_cast<int>(DType::gq) + 1;

struct DTypeTraits {
  std::string_view name;  // lower-case, as printed and parsed ("f16", "q4_k")
  int64_t block_elems;    // values per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
  bool is_float;          // plain floating point
  bool is_block;          // packed block type (cannot be strided inside a row)
};

const DTypeTraits& dtype_traits(DType t);
inline std::string_view dtype_name(DType t) { return dtype_traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive

// Bytes for a row of n elements; error when n is not a multiple of the block size.
Result<int64_t> row_bytes(DType t, int64_t n);
// Bytes for n elements, n a multiple of the block size (checked: aborts otherwise).
int64_t elems_to_bytes(DType t, int64_t n);

}  // namespace lithe

#ifndef __CUDACC__
template <>
struct fmt::formatter<lithe::DType> : fmt::formatter<std::string_view> {
  auto format(lithe::DType t, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(lithe::dtype_name(t), ctx);
  }
};
#endif
