// Group-quantized weights as the kernels run them (the "gq" runtime formats): the canonical host
// matrix every backend packs from, its scalar reference (dequantize, linear: the oracle of every
// gq kernel), and random matrices for tests and benchmarks.
//
// Canonical layout (unpacked, one byte per code; backends repack it once, at load):
//   codes  [n_out][n_in]      u8, 0 .. 2^bits - 1, in KERNEL column order
//   scales [n_out][n_groups]  f16 bits; group g covers kernel columns [g*group, (g+1)*group)
//   zeros  [n_out][n_groups]  u8 integer zero points (all 2^(bits-1) when sym)
//   perm   [n_in]             i32 or empty: kernel column k multiplies activation x[perm[k]]
//                             (GPTQ act-order: columns sorted by group at load, so every group is
//                             contiguous); empty = identity
//   W[r][perm[k]] = f32(scales[r][k / group]) * (codes[r][k] - zeros[r][k / group])
// n_groups = ceil(n_in / group): the last group may be shorter (SmolLM2's 576 columns in groups of
// 128); group == n_in: one scale per row, "per channel". Kernels state the shapes they run.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "lithe/core/packed.h"
#include "lithe/core/status.h"

namespace lithe::gq {

struct Matrix {
  QuantFormat fmt;
  int64_t n_out = 0, n_in = 0;
  std::vector<uint8_t> codes;    // [n_out][n_in]
  std::vector<uint16_t> scales;  // [n_out][n_groups] f16 bits
  std::vector<uint8_t> zeros;    // [n_out][n_groups]
  std::vector<int32_t> perm;     // [n_in] or empty

  int64_t n_groups() const { return fmt.group > 0 ? (n_in + fmt.group - 1) / fmt.group : 0; }
  int maxq() const { return (1 << fmt.bits) - 1; }
};

// invalid_argument naming the value unless every field is consistent: bits in {2, 3, 4, 8},
// 0 < group <= n_in, vector sizes, codes and zeros <= maxq, sym zeros == 2^(bits-1), perm a
// permutation, and the 2:4 pattern when fmt.sparse24.
Status validate(const Matrix& m);

// True when every aligned run of 4 kernel columns of every row has >= 2 zero weights
// (code == zero point): the matrix may be run as 2:4 sparse.
bool is_2to4(const Matrix& m);

// The f32 matrix [n_out][n_in] (ORIGINAL column order) that m stands for.
std::vector<float> dequantize(const Matrix& m);

// Reference linear: y[i][r] = sum_c x[i][c] * W[r][c] for i < rows, x [rows][n_in], y [rows][n_out]
// (f32 in and out, every product and sum in double).
void reference_linear(const Matrix& m, const float* x, int64_t rows, float* y);

// "int4-g128", "int3-g128-sym", "int8" (no group: per channel), "int4-g128-sym-2:4": bits, group,
// sym, sparse24 (group 0 = per channel; callers set group = n_in per matrix). For synthetic models.
Result<QuantFormat> parse_format(std::string_view name);

// A random matrix of format f: codes uniform in 0..maxq, scales uniform in [0.5, 1.5] * scale / maxq
// (as f16), zeros uniform (mid-range when sym); act_order: a random perm; f.sparse24: two zero
// weights in each aligned run of 4 columns.
Matrix random_matrix(const QuantFormat& f, int64_t n_out, int64_t n_in, uint64_t seed, bool act_order,
                     float scale = 0.05f);

}  // namespace lithe::gq
