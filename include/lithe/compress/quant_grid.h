// Uniform integer quantization grids for weight compression (RTN, GPTQ, SparseGPT).
//
// A grid is `bits` wide (2, 3, 4 or 8; maxq = 2^bits - 1), symmetric or asymmetric, with one
// (scale, zero) pair per output row (group = 0, "per-channel") or per group of `group`
// consecutive input columns of a row (with partial_groups, the last group of a row may be shorter
// when `group` does not divide the row, as in the GPTQ reference). Parameters are found from a row's (or group's) values
// exactly as the GPTQ reference Quantizer (IST-DASLab/gptq quant.py, weight=True) does:
//   xmin = min(min(x), 0), xmax = max(max(x), 0)       (the grid always contains 0)
//   sym:  xmax = max(|xmin|, xmax), xmin = -xmax         (see note below)
//   xmin == xmax == 0 (all-zero values): xmin = -1, xmax = +1
//   scale = (xmax - xmin) / maxq
//   asym: zero = round(-xmin / scale);  sym: zero = (maxq + 1) / 2
//   code  = clamp(round(x / scale) + zero, 0, maxq);  dequant = scale * (code - zero)
// round() is round-half-to-even (torch.round); the arithmetic is float32 like the reference.
// Optional clipping search (`mse`): try shrink factors p = 1 - i/grid for i < maxshrink*grid
// on [p*xmin, p*xmax] and keep the (scale, zero) with the least sum |dequant(x) - x|^norm
// (reference defaults norm 2.4, grid 100, maxshrink 0.8).
// Note (deviation): the reference only mirrors xmin to -xmax when xmin < 0, so a symmetric row
// with no negative value gets a half-used grid that clips its upper half; here a symmetric grid
// is always [-xmax, xmax].
#pragma once

#include <algorithm>
#include <cstdint>

#include "lithe/core/status.h"

namespace lithe::compress {

struct QuantGrid {
  int bits = 4;          // 2, 3, 4 or 8
  bool sym = false;      // symmetric grid, zero fixed at (maxq + 1) / 2
  int64_t group = 0;     // 0: one (scale, zero) per row; else input columns per group
  bool partial_groups = false;  // allow a shorter last group when group does not divide n_in
  bool mse = false;      // clipping search (grid search over shrink factors)
  float mse_norm = 2.4f;
  int mse_grid = 100;
  float mse_maxshrink = 0.8f;

  int maxq() const { return (1 << bits) - 1; }
  // Number of groups per row for a matrix with n_in input columns (1 when group == 0).
  int64_t n_groups(int64_t n_in) const { return group == 0 ? 1 : (n_in + group - 1) / group; }
  // Columns of the group starting at input column c0 (the last one may be shorter).
  int64_t group_len(int64_t c0, int64_t n_in) const { return group == 0 ? n_in : std::min(group, n_in - c0); }
  // invalid_argument when bits is not 2/3/4/8, group < 0, or group does not divide n_in (and
  // partial_groups is off): the message names the nearest dividing group sizes.
  Status validate(int64_t n_in) const;
};

// One row's (or group's) grid parameters.
struct GridParams {
  float scale = 1.0f;
  float zero = 0.0f;
};

// Parameters for the n values x[0..n) (n >= 1), as described above.
GridParams find_params(const QuantGrid& grid, const float* x, int64_t n);

// Integer code of x on the grid (0..maxq).
inline int quantize_code(float x, GridParams p, int maxq);
// scale * (code - zero).
inline float dequantize_code(int code, GridParams p) { return p.scale * (static_cast<float>(code) - p.zero); }
// dequantize_code(quantize_code(x)).
inline float quantize_value(float x, GridParams p, int maxq) { return dequantize_code(quantize_code(x, p, maxq), p); }

}  // namespace lithe::compress

#include <cmath>

namespace lithe::compress {
inline int quantize_code(float x, GridParams p, int maxq) {
  float q = std::nearbyint(x / p.scale) + p.zero;  // default rounding mode: half to even
  if (!(q >= 0.0f)) q = 0.0f;                      // also maps NaN to 0
  if (q > static_cast<float>(maxq)) q = static_cast<float>(maxq);
  return static_cast<int>(q);
}
}  // namespace lithe::compress
