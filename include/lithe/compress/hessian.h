// Layer Hessian handling shared by GPTQ and SparseGPT, and the layer reconstruction error.
//
// H is the [n_in][n_in] row-major layer Hessian, H = 2 X Xᵀ over calibration inputs X
// [n_in][N] (any positive multiple works: dampening is relative). Preparation follows the GPTQ
// reference (IST-DASLab/gptq fasterquant):
//   1. dead inputs: H_ii == 0 -> H_ii = 1 (the solver also zeroes W[:, i]);
//   2. optional column permutation (act-order), applied to rows and columns of H;
//   3. dampening: H += percdamp * mean(diag H) * I (after step 1; default percdamp 0.01);
//   4. U = upper Cholesky factor of H^-1 (Uᵀ U = H^-1), the factor GPTQ/SparseGPT walk along.
// If the Cholesky factorization fails, percdamp is raised x10 (from 1e-6 when it was 0) up to
// max_percdamp; the value used is reported. H with a negative or non-finite diagonal entry is
// rejected (it cannot be 2XXᵀ). Everything is computed in double; U is handed out as f32.
// U is computed as V^-1 where H = V Vᵀ, V upper (a Cholesky of H with rows and columns reversed)
// - the same matrix as the reference's cholesky(cholesky_inverse(cholesky(H)), upper=True),
// in one factorization and one triangular inverse.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lithe/core/status.h"

namespace lithe::compress {

struct HessianOptions {
  double percdamp = 0.01;     // dampening, fraction of the mean diagonal
  double max_percdamp = 1.0;  // give up when the Cholesky still fails at this fraction
};

struct PreparedHessian {
  int64_t n = 0;
  std::vector<float> u;          // [n][n] upper factor of (H + λI)^-1 in solver (permuted) order
  std::vector<uint8_t> dead;     // [n] 1 where diag(H) == 0, original column order
  int64_t n_dead = 0;
  double mean_diag = 0;          // mean of diag(H) after the dead-input fix
  double percdamp_used = 0;      // fraction actually used (> requested after retries)
  double damp = 0;               // λ = percdamp_used * mean_diag
  int damp_retries = 0;          // how many times the dampening was raised
};

// Steps 1-4 above. perm (empty: identity) lists, for each solver position k, the original column
// perm[k]. invalid_argument on bad sizes, a negative/non-finite diagonal, or a Hessian that stays
// indefinite up to max_percdamp.
Result<PreparedHessian> prepare_hessian(std::span<const double> h, int64_t n, const HessianOptions& opt,
                                        std::span<const int32_t> perm = {});

// Act-order permutation: columns by descending diag(H) (dead inputs count as 1), ties by index.
std::vector<int32_t> act_order_perm(std::span<const double> h, int64_t n);
// The same from the diagonal alone.
std::vector<int32_t> act_order_perm_from_diag(std::span<const double> diag);

// Pieces of prepare_hessian shared with the GPU preparation (compress/cuda), so both follow one
// policy. Step 1 from the diagonal: dead inputs and the mean diagonal after the fix;
// invalid_argument on a negative or non-finite entry.
struct HessianDiagonal {
  std::vector<uint8_t> dead;  // [n] 1 where diag(H) == 0
  int64_t n_dead = 0;
  double mean_diag = 0;
};
Result<HessianDiagonal> inspect_hessian_diagonal(std::span<const double> diag);
// invalid_argument unless 0 <= percdamp <= max_percdamp.
Status check_damp_options(const HessianOptions& opt);
// The dampening to try after the Cholesky failed at `failed` (x10, from 1e-6 when 0), or
// invalid_argument naming the matrix when that would exceed max_percdamp.
Result<double> next_percdamp(double failed, int64_t n, double mean_diag, const HessianOptions& opt);
// Logs the warning prepare_hessian gives when the dampening had to be raised.
void warn_damp_raised(int64_t n, const HessianOptions& opt, double used);

// err(W, Ŵ, H) = tr((W-Ŵ) H (W-Ŵ)ᵀ) / tr(W H Wᵀ); with H = 2XXᵀ this is ‖WX − ŴX‖² / ‖WX‖².
// W and Ŵ are [n_out][n_in]; H is used as given (no dead-input fix, no dampening).
Result<double> reconstruction_error(std::span<const float> w, std::span<const float> w_hat, std::span<const double> h,
                                    int64_t n_out, int64_t n_in);

// A float Hessian widened to double (the solvers take double).
std::vector<double> to_double(std::span<const float> h);

}  // namespace lithe::compress
