// The seam between the CPU op entry points (cpu_ops.cpp: argument checks, threading, scratch;
// compiled for the baseline ISA) and the per-ISA kernel sets (kernels_avx2.cpp, kernels_avx512.cpp:
// one source, kernels_*.inc, compiled once per instruction set; kernels_scalar.cpp: the reference
// loops). Each set exports a table of plain function pointers that work on row / item ranges; the
// entry points split the work over global_pool() and call the table of the active ISA.
//
// Everything here is plain data or internal-linkage (static) helpers: the ISA translation units
// must not odr-use inline functions with external linkage (std::, fmt, lithe/core), because the
// linker keeps one copy of each for the whole program and might pick the one compiled with
// AVX-512 flags.
#pragma once

#include <cstdint>

#include "kernels/cpu/gq_layout.h"
#include "lithe/kernels/cpu.h"

namespace lithe::cpu::detail {

// Weight encodings the linear kernels handle (a subset of DType, dense so tables can index it).
enum class WKind : int { f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q6_k };
inline constexpr int kNumWKinds = 8;
static constexpr bool is_float_kind(WKind k) { return k == WKind::f32 || k == WKind::f16 || k == WKind::bf16; }

// One linear call: Y[m, n_out] = X[m, n_in] · W^T.
struct LinearJob {
  WKind kind;
  const uint8_t* w;      // [n_out] rows of row_bytes (GGUF block layout or plain f32/f16/bf16)
  int64_t row_bytes;
  int64_t n_out, n_in, m;
  const float* x;        // [m][n_in] f32 activations (used by the float kinds)
  const uint8_t* xq;     // [m] rows of xq_row_bytes: activations quantized by quantize_acts (block kinds)
  int64_t xq_row_bytes;
  float* y;              // [m][n_out]
  const uint8_t* packed = nullptr;  // [n_out] rows of the batch layout (pack_weight_rows), or null
};

// One gq linear call (layout kLayoutCpuGq, gq_layout.h): Y[m, n_out] = X[m, n_in] · W^T.
struct GqJob {
  GqGeom g;
  GqActs mode = GqActs::int16;  // activation mode
  const uint8_t* rows = nullptr;   // [n_out] packed rows of g.row_stride bytes
  const uint8_t* zeros = nullptr;  // zero points of row 0; row r's at zeros + r * z_stride (0: sym)
  int64_t z_stride = 0;
  int64_t m = 0;
  // Prepared activations (gq_prepare_acts), each activation row on its own (so a row's result does
  // not depend on m): [m] rows of act_row_bytes (int8 / int16: unit records of the ISA; f32: the
  // gathered row zero-padded to units * 128 floats), then [m] rows of xs_stride floats X_e, one per
  // scale entry e of the weight rows (kernel-column order, after the act-order gather; 0 past
  // n_ent): the activations' sum over the entry's columns that the zero-point term needs (f32 mode:
  // sum of x; int8 / int16: sum of d_x * quants, as the kernels see them).
  uint8_t* acts = nullptr;
  int64_t act_row_bytes = 0;
  float* xsum = nullptr;
  float* y = nullptr;      // [m][n_out]
};

// Row r of a gq job: its codes, f16 scales (ent_stride) and zero points (ent_stride).
static inline const uint8_t* gq_codes(const GqJob& j, int64_t r) { return j.rows + r * j.g.row_stride + j.g.code_off; }
static inline const uint16_t* gq_scales(const GqJob& j, int64_t r) {
  return reinterpret_cast<const uint16_t*>(j.rows + r * j.g.row_stride);
}
static inline const uint8_t* gq_zeros(const GqJob& j, int64_t r) { return j.zeros + r * j.z_stride; }

struct KernelTable {
  Isa isa;
  // Bytes of one quantized activation row for weights of `kind` (0 for float kinds).
  int64_t (*act_row_bytes)(WKind kind, int64_t n_in);
  // Quantizes rows [r0, r1) of x[.][n_in] into dst rows of act_row_bytes (layout private to the ISA).
  void (*quantize_acts)(WKind kind, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst);
  // Output rows are handed to linear_rows in multiples of this (except the last range).
  int64_t (*linear_row_grain)(WKind kind, int64_t n_in, int64_t m);
  // Per-thread scratch (64-byte aligned) that linear_rows needs for this shape.
  int64_t (*linear_scratch_bytes)(WKind kind, int64_t n_in, int64_t m);
  // Output rows [r0, r1) of the job, for all m activation rows.
  void (*linear_rows)(const LinearJob& job, int64_t r0, int64_t r1, uint8_t* scratch);
  // The batch layout of a weight of `kind` (Tensor::with_batch_layout): bytes per row (0: this ISA
  // keeps none for the kind), and rows [r0, r1) of job.w decoded into the same rows of `packed`
  // (the job's kind, w, row_bytes and n_in are read). linear_rows reads job.packed when it is set.
  int64_t (*batch_row_bytes)(WKind kind, int64_t n_in);
  void (*pack_weight_rows)(const LinearJob& job, int64_t r0, int64_t r1, uint8_t* packed);

  void (*rmsnorm_rows)(const float* x, const float* w, float eps, int64_t n, int64_t r0, int64_t r1, float* y);
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  void (*add)(float* y, const float* x, int64_t n);
  float (*softmax_weights)(float* x, int64_t n, float scale, float* sums);
  // Tokens [t0, t1) of rope(); style 0 interleaved, 1 half. angles: null (computed per token) or
  // a rope_angles() table to look them up in.
  void (*rope_tokens)(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                      const float* inv_freq, int64_t rot_dim, int style, const float* angles);
  // Attention work items [i0, i1) (attention_item below), with per-thread scratch of
  // attention_scratch_floats(head_dim, q_block) floats (64-byte aligned).
  int64_t (*attention_scratch_floats)(int64_t head_dim, int64_t q_block);
  void (*attention_items)(const AttentionArgs& a, int64_t q_block, int64_t i0, int64_t i1, float* scratch);

  // gq weights. Prepares activation rows [r0, r1) of x[.][n_in] into j.acts / j.xsum (gathered
  // by perm when not null).
  void (*gq_prepare_acts)(const GqJob& j, const float* x, const int32_t* perm, int64_t r0, int64_t r1);
  // Per-thread scratch (64-byte aligned) of gq_linear_rows; output rows [r0, r1) for all m rows.
  int64_t (*gq_scratch_bytes)(const GqJob& j);
  void (*gq_linear_rows)(const GqJob& j, int64_t r0, int64_t r1, uint8_t* scratch);
};

// Work items of attention: query blocks of q_block queries for each head, ordered so that any
// contiguous half of the item range holds about half of the causal work: the j-th block visited
// alternates between the front and the back of the sequence (0, nb-1, 1, nb-2, ...).
static inline int64_t attention_n_items(const AttentionArgs& a, int64_t q_block) {
  return a.n_heads * ((a.n_q + q_block - 1) / q_block);
}
static inline void attention_item(const AttentionArgs& a, int64_t q_block, int64_t item, int64_t& head, int64_t& t0,
                           int64_t& t1) {
  const int64_t nb = (a.n_q + q_block - 1) / q_block;
  const int64_t j = item / a.n_heads;
  head = item % a.n_heads;
  const int64_t b = (j % 2 == 0) ? j / 2 : nb - 1 - j / 2;
  t0 = b * q_block;
  t1 = t0 + q_block < a.n_q ? t0 + q_block : a.n_q;
}

// The scalar gq kernels (gq_scalar.cpp), entries of table_scalar().
void gq_prepare_acts_scalar(const GqJob& j, const float* x, const int32_t* perm, int64_t r0, int64_t r1);
int64_t gq_scratch_bytes_scalar(const GqJob& j);
void gq_linear_rows_scalar(const GqJob& j, int64_t r0, int64_t r1, uint8_t* scratch);

const KernelTable& table_scalar();
const KernelTable& table_avx2();    // only valid when the CPU has AVX2/FMA/F16C
const KernelTable& table_avx512();  // only valid when the CPU has the AVX-512 subset above

}  // namespace lithe::cpu::detail
