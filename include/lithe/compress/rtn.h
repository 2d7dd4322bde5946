// Round-to-nearest (RTN) weight quantization and the quantized-matrix container shared by RTN,
// GPTQ and SparseGPT.
//
// Layout: W is [n_out][n_in] f32 row-major (rows = output features, columns = input features,
// the reduction axis). QuantizedMatrix keeps
//   codes  [n_out][n_in]      uint8, 0..maxq, in the original column order
//   scales [n_out][n_groups]  f32,  zeros [n_out][n_groups] f32 (zero points are integers)
//   g_idx  [n_in]             int32, the group of each input column (i / group without act-order;
//                             a permutation of groups with GPTQ act-order and dynamic groups)
// and dequantizes as W[r][c] = scales[r][g] * (codes[r][c] - zeros[r][g]), g = g_idx[c].
// n_groups = ceil(n_in / group) (the last group may be shorter), or 1 when group == 0 (per-row grid).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lithe/compress/quant_grid.h"
#include "lithe/core/status.h"

namespace lithe::compress {

struct QuantizedMatrix {
  int64_t n_out = 0, n_in = 0;
  int bits = 4;
  int64_t group = 0;  // 0 = per row
  bool sym = false;
  std::vector<uint8_t> codes;   // [n_out][n_in]
  std::vector<float> scales;    // [n_out][n_groups]
  std::vector<float> zeros;     // [n_out][n_groups]
  std::vector<int32_t> g_idx;   // [n_in]

  int64_t n_groups() const { return group == 0 ? 1 : (n_in + group - 1) / group; }
  GridParams params(int64_t row, int64_t col) const {
    const int64_t i = row * n_groups() + g_idx[static_cast<size_t>(col)];
    return {scales[static_cast<size_t>(i)], zeros[static_cast<size_t>(i)]};
  }
};

// An empty matrix of the right sizes with g_idx[c] = c / group.
QuantizedMatrix make_quantized(int64_t n_out, int64_t n_in, const QuantGrid& grid);

// RTN: grid parameters from each row (or group) of W, then every weight rounded to its grid.
Result<QuantizedMatrix> rtn(std::span<const float> w, int64_t n_out, int64_t n_in, const QuantGrid& grid);

// The f32 matrix [n_out][n_in] a QuantizedMatrix stands for.
std::vector<float> dequantize(const QuantizedMatrix& q);

// invalid_argument unless w.size() == n_out * n_in and both are positive.
Status check_matrix(std::span<const float> w, int64_t n_out, int64_t n_in);

}  // namespace lithe::compress
