// Launchers of the CUDA solver kernels (walk.cu, matrix.cu, select.cu); private to
// src/compress/cuda. Host-only header: device pointers and a stream, no CUDA types. Every launcher
// checks its arguments, enqueues on `s` without synchronizing and reports launch errors.
// Matrices are row-major; "solver order" is the column order the walk goes in (act-order's perm
// applied), "original order" the weight's own.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lithe/core/status.h"

struct CUstream_st;

namespace lithe::compress::cuda {

using Stream = CUstream_st*;

enum class Elem { f32, f16, bf16 };  // weight element types

// ---- matrix.cu ----------------------------------------------------------------------------------
// dst[r][k] = dead[src(k)] ? 0 : f32(w[r][src(k)]) with src(k) = perm ? perm[k] : k (dead may be null).
Status load_working(const void* w, Elem t, int64_t n_out, int64_t n, const int32_t* perm, const uint8_t* dead,
                    float* dst, Stream s);
// dst[i] = src[i] rounded to t (round to nearest even), count values.
Status store_elems(const float* src, int64_t count, void* dst, Elem t, Stream s);
// diag[i] = h[i][i]; *n_bad = number of non-finite entries of h (n x n).
Status hessian_diagonal(const float* h, int64_t n, float* diag, unsigned long long* n_bad, Stream s);
// Lower triangle of m [n][n] f64 = P Hp P + diag(fix): m[i][j] = h[src(n-1-i)][src(n-1-j)] for
// j <= i, a zero diagonal entry replaced by 1, plus lambda on the diagonal (hessian.cpp's matrix
// before its Cholesky); the strict upper triangle is zeroed.
Status build_reversed(const float* h, int64_t n, const int32_t* perm, double lambda, double* m, Stream s);
// u[i][j] = j >= i ? f32(m[n-1-i][n-1-j]) : 0 (the upper factor from the inverted lower one).
Status extract_upper(const double* m, int64_t n, float* u, Stream s);
// h[i][j] = h[j][i] for i < j: the lower triangle mirrored into the upper one.
Status mirror_lower(float* h, int64_t n, Stream s);
// a[0 .. count) = f32(w) - w_hat, a[count .. 2 count) = f32(w).
Status stack_diff(const void* w, Elem t, const float* w_hat, int64_t count, float* a, Stream s);
// out[r] = Σ_c a[r][c] y[r][c] in f64, for rows r < rows of width n.
Status row_dots(const float* a, const float* y, int64_t rows, int64_t n, double* out, Stream s);
// *out = number of entries of x equal to 0 (count values).
Status count_zeros(const float* x, int64_t count, unsigned long long* out, Stream s);

// ---- select.cu: SparseGPT's adaptive mask of one block -----------------------------------------
// Device scratch bytes prune_block needs for n_out x bk scores.
size_t prune_block_scratch_bytes(int64_t n_out, int64_t bk);
// Marks mask[r][i1 + c] = 0 for the k lowest scores wk[r][i1+c]² / u[i1+c][i1+c]² of the
// [n_out x bk] block (ties by position r * bk + c), as sparsegpt.cpp's k_smallest.
Status prune_block(const float* wk, const float* u, int64_t n_out, int64_t n, int64_t i1, int64_t bk, int64_t k,
                   uint8_t* mask, void* scratch, size_t scratch_bytes, Stream s);

// ---- walk.cu: the GPTQ / SparseGPT column walk of one lazy block -------------------------------
inline constexpr int kWalkMaxBlock = 128;  // widest lazy block (its U block fills 64 KB of shared memory)

// One block [i1, i1 + bk) of the walk, all rows in parallel (a warp per row). Column j of a row:
//   compress: GPTQ rounds to the grid; SparseGPT zeroes pruned weights and, with a grid, rounds
//             the kept ones (code of the zero for pruned ones);
//   e = (w - q) / U[j][j] recorded in err, Σ e² added to row_loss, later block columns updated.
// The caller then applies wk[:, i2:] -= err · U[i1:i2, i2:] (an SGEMM).
// Grids: `group` > 0: dynamic groups (solver order) found from the current weights when the walk
// reaches a group's first column, stored in scales/zeros[r][j / group]; a group that starts in
// the block must either end in it or start at i1 (the caller picks the block width so).
// group == 0: grids given in scales/zeros, group_at[j] naming the group (null: group 0).
// n:m pruning (prune_m > 0): groups of prune_m columns scored when reached (must lie in the
// block); otherwise a non-null mask holds the block's given mask (1 = kept).
struct WalkArgs {
  int64_t n_out = 0, n = 0;       // rows; columns
  int64_t i1 = 0;                 // block start (solver order)
  int bk = 0;                     // block width, 1 .. kWalkMaxBlock
  const float* wk = nullptr;      // [n_out][n] working copy in solver order (read only)
  const float* u = nullptr;       // [n][n] upper Cholesky factor of H^-1, solver order
  float* err = nullptr;           // [n_out][kWalkMaxBlock] the block's scaled errors
  float* w_hat = nullptr;         // [n_out][n] original order: the compressed values
  const int32_t* perm = nullptr;  // solver position -> original column (null: identity)
  double* row_loss = nullptr;     // [n_out]
  // Quantization (codes == null: none).
  uint8_t* codes = nullptr;       // [n_out][n] original order
  int maxq = 15;
  bool sym = false;
  float* scales = nullptr;        // [n_out][n_groups]
  float* zeros = nullptr;
  int64_t n_groups = 1;
  int64_t group = 0;
  const int32_t* group_at = nullptr;
  // Pruning (mask == null: none); solver order is the original order here (no act-order).
  uint8_t* mask = nullptr;        // [n_out][n], 1 = kept
  int prune_n = 0, prune_m = 0;
};
// sms: the device's multiprocessor count (sizes the grid).
Status column_walk(const WalkArgs& a, int sms, Stream s);

}  // namespace lithe::compress::cuda
