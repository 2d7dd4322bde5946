// SparseGPT (Frantar & Alistarh 2023; thesis Sec. 3.3, Algorithm 3.3) and magnitude pruning.
//
// SparseGPT walks the columns exactly like GPTQ (same Hessian handling, hessian.h; same lazy
// blocks of block_size columns) with "compress" = zero the pruned weights (and, with a grid,
// round the kept ones): each column's error is spread over the later columns through U.
// Mask selection, scored by the OBS error w² / U_cc² with the current weights:
//   unstructured (prune_n == 0): at the start of each lazy block, the floor(sparsity * count)
//     lowest-scoring weights of the whole [n_out x block] slice (ties by position) are pruned -
//     the reference's adaptive mask selection with mask block = lazy block;
//   n:m (prune_n > 0): in every group of prune_m consecutive columns of each row, the prune_n
//     lowest-scoring weights are pruned (scored when the walk reaches the group's first column).
//     n counts zeros, as in the reference's prunen/prunem: 2:4 and 4:8 keep half.
// Joint quantization (quant set): kept weights are rounded to the grid in the same pass; the
// grid is per row from W (dead columns zeroed) or, with groups, from the current weights of each
// group when the walk reaches it (as GPTQ without act-order). Pruned weights map to the code of 0.
// Mask convention: mask[r][c] = 1 keeps the weight, 0 prunes it (thesis' M).
//
// Magnitude pruning baselines: unstructured by |w| per matrix (the layer-wise magnitude baseline
// of the SparseGPT paper and the Wanda code; per-row available), and n:m by |w| per row.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lithe/compress/hessian.h"
#include "lithe/compress/quant_grid.h"
#include "lithe/compress/rtn.h"
#include "lithe/core/status.h"

namespace lithe::compress {

struct SparseGptOptions {
  double sparsity = 0.5;     // unstructured fraction pruned (ignored for n:m)
  int64_t prune_n = 0;       // n:m: zeros per group (0 = unstructured)
  int64_t prune_m = 0;       // n:m: group width
  int64_t block_size = 128;  // lazy-update block = unstructured mask block
  HessianOptions hessian{};
  std::optional<QuantGrid> quant{};  // joint quantization of the kept weights
};

struct SparseGptResult {
  std::vector<uint8_t> mask;            // [n_out][n_in], 1 = kept
  std::vector<float> w;                 // [n_out][n_in] pruned (and quantized) weights
  std::optional<QuantizedMatrix> q;     // with joint quantization
  double loss = 0;                      // ½ Σ (w − ŵ)² / U_jj²
  int64_t n_dead = 0;
  double percdamp_used = 0, damp = 0;
  int damp_retries = 0;
};

Result<SparseGptResult> sparsegpt(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const double> h,
                                  const SparseGptOptions& opt);
Result<SparseGptResult> sparsegpt(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const float> h,
                                  const SparseGptOptions& opt);

enum class MagnitudeScope { matrix, row };

struct MagnitudeOptions {
  double sparsity = 0.5;  // unstructured fraction pruned
  MagnitudeScope scope = MagnitudeScope::matrix;
  int64_t prune_n = 0, prune_m = 0;  // n:m by |w| per row (overrides sparsity)
};

struct PruneResult {
  std::vector<uint8_t> mask;  // 1 = kept
  std::vector<float> w;
};

Result<PruneResult> prune_magnitude(std::span<const float> w, int64_t n_out, int64_t n_in, const MagnitudeOptions& opt);

// invalid_argument unless 0 < n < m and m divides n_in (or n == m == 0).
Status check_n_m(int64_t n, int64_t m, int64_t n_in);

}  // namespace lithe::compress
