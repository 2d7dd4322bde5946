// Scalar reference (de)quantizers for the plain float types and the ggml block types.
// These are the oracle every fast kernel is tested against. Block layouts: src/kernels/ref/ggml_blocks.h.
#pragma once

#include <cstdint>

#include "lithe/core/dtype.h"
#include "lithe/core/status.h"

namespace lithe::ref {

// Whether dequantize_row / quantize_row handle `t`.
bool can_dequantize(DType t);
bool can_quantize(DType t);

// dst[0..n) = value of the n elements stored at src. n must be a multiple of the block size.
// Supported: f32 f16 bf16 f64 i8 i16 i32 q4_0 q4_1 q5_0 q5_1 q8_0 q8_1 q2_k q3_k q4_k q5_k q6_k q8_k.
Status dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Encodes n floats as `t` (round-to-nearest quantizers; no importance weighting).
Status quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace lithe::ref
