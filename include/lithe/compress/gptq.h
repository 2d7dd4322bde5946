// GPTQ (Frantar et al. 2022; thesis Sec. 3.2, Algorithm 3.2) for one linear layer.
//
// Input: W [n_out][n_in] f32 row-major and the layer Hessian H [n_in][n_in] (2XXᵀ, double or
// float). Hessian handling (dead inputs, dampening with retries, U = chol(H^-1) upper) is
// hessian.h's. Columns are quantized in order (or act-order: descending diag H); each column's
// rounding error is spread over the not-yet-quantized columns through U, lazily in blocks of
// block_size columns. Grid parameters (quant_grid.h):
//   group == 0:        one grid per row, from the whole row of W (dead columns zeroed);
//   group > 0, dynamic: at the first column of each group (solver order) from the current,
//                      already-updated weights of that group's columns (reference behaviour,
//                      but using the fully updated values, so results do not depend on B);
//   static_groups:     every group's grid up front from the original W in original column
//                      order, so with act-order groups keep their original boundaries
//                      (g_idx[c] = c / group).
// Output: the QuantizedMatrix (codes in original column order; g_idx = group of each original
// column), Ŵ = dequantize(q), and loss = ½ Σ (w − q)² / U_jj², which equals
// ½ tr((W−Ŵ)(H+λI)(W−Ŵ)ᵀ) (= ‖(W−Ŵ)X‖² for H = 2XXᵀ, up to dampening).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lithe/compress/hessian.h"
#include "lithe/compress/quant_grid.h"
#include "lithe/compress/rtn.h"
#include "lithe/core/status.h"

namespace lithe::compress {

struct GptqOptions {
  QuantGrid grid{};
  int64_t block_size = 128;  // lazy-update block B
  HessianOptions hessian{};  // percdamp 0.01
  bool act_order = false;    // quantize columns by descending diag(H)
  bool static_groups = false;
};

struct GptqResult {
  QuantizedMatrix q;
  std::vector<float> w_hat;   // [n_out][n_in] = dequantize(q)
  double loss = 0;            // ½ Σ (w − q)² / U_jj²
  std::vector<int32_t> perm;  // act-order: solver position -> original column (empty otherwise)
  int64_t n_dead = 0;         // inputs with diag(H) == 0 (their columns are zero)
  double percdamp_used = 0;   // dampening fraction used (raised when the Cholesky failed)
  double damp = 0;            // the absolute λ added to diag(H)
  int damp_retries = 0;
};

Result<GptqResult> gptq(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const double> h,
                        const GptqOptions& opt);
Result<GptqResult> gptq(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const float> h,
                        const GptqOptions& opt);

}  // namespace lithe::compress
