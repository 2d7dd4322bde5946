// Pieces shared by the GPTQ and SparseGPT column walks (private to src/compress).
//
// Both solvers walk the columns of a working copy wk [n_out][n] (solver order) in lazy blocks
// [i1, i2): inside a block each row is processed on its own (rows are independent), recording
// the scaled error e = (w - q) / U[j][j] of every column in E [n_out][B]; after the block the
// deferred update wk[:, i2:] -= E · U[i1:i2, i2:] is one GEMM.
#pragma once

#include <cstdint>

namespace lithe::compress::detail {

// The current (fully updated) values of columns [a, b) of one row, mid-block: columns below i2
// are already up to date in the row; columns from i2 on still miss the deferred update of the
// `done` columns of this block processed so far, which is added here.
inline void gather_current(const float* row, const float* e_row, const float* u, int64_t n, int64_t i1, int64_t i2,
                           int64_t done, int64_t a, int64_t b, float* out) {
  for (int64_t c = a; c < b; ++c) {
    float v = row[c];
    if (c >= i2)
      for (int64_t t = 0; t < done; ++t) v -= e_row[t] * u[(i1 + t) * n + c];
    out[c - a] = v;
  }
}

// Applies e to the rest of the block: row[j+1 .. i2) -= e * U[j][j+1 .. i2).
inline void update_in_block(float* row, float e, const float* u, int64_t n, int64_t j, int64_t i2) {
  const float* uj = u + j * n;
  for (int64_t c = j + 1; c < i2; ++c) row[c] -= e * uj[c];
}

}  // namespace lithe::compress::detail
