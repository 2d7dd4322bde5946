// Internal pieces of the scalar reference CPU kernels (cpu_ref.cpp), shared with the scalar kernel
// table (kernels/cpu/kernels_scalar.cpp) and the op entry points (argument checks).
//
// Reference activation row for block weights (natural element order):
//   float d[n_in / B]   scale of each activation block (B = 32 for q4_0/q4_1/q8_0, 256 for q4_k/q6_k)
//   int8  q[n_in]       quants, x[j] ~ d[j / B] * q[j]
#pragma once

#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "lithe/kernels/cpu.h"

namespace lithe::cpu::ref_detail {

// Maps a dtype to the kernel kind; error (naming the dtype and the supported list) otherwise.
Result<detail::WKind> linear_kind(DType t);
// Checks a linear() call: host contiguous 2-D weight of a supported dtype, block-aligned n_in,
// m >= 0, non-null x and y when m > 0.
Status check_linear(const Tensor& w, const float* x, int64_t m, const float* y, detail::WKind& kind);
// Checks an attention() call (shapes, dtype, pointers, head grouping, head_dim limit).
Status check_attention(const AttentionArgs& a);

int64_t act_block(detail::WKind kind);  // 32, 256, or 0 for float kinds
int64_t act_row_bytes(detail::WKind kind, int64_t n_in);
void quantize_act_row(detail::WKind kind, const float* x, int64_t n_in, uint8_t* dst);
// One output: dot of weight row w_row with activation row (quantized `act` for block kinds,
// f32 `x` for float kinds).
float dot_row(detail::WKind kind, const uint8_t* w_row, const uint8_t* act, const float* x, int64_t n_in);

// Scalar attention for query rows [t0, t1) of head `head`.
void attention_rows(const AttentionArgs& a, int64_t head, int64_t t0, int64_t t1);

}  // namespace lithe::cpu::ref_detail
