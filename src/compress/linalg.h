// Dense linear algebra for the compression solvers (private to src/compress).
//
// All matrices are row-major. With LITHE_HAVE_LAPACK the routines call LAPACK/BLAS (OpenBLAS:
// dpotrf, dtrtri, sgemm, dgemm through their Fortran symbols, so no C header is needed);
// without it they fall back to plain blocked C++ loops split over lithe's global ThreadPool.
#pragma once

#include <cstdint>

namespace lithe::compress::detail {

// In-place lower Cholesky of the symmetric matrix a [n][n] (only the lower triangle is read):
// on success the lower triangle holds L with A = L Lᵀ. Returns false when A is not (numerically)
// positive definite; a is then garbage.
bool cholesky_lower(double* a, int64_t n);

// In-place inverse of the lower-triangular matrix held in the lower triangle of l [n][n]
// (the strict upper triangle is ignored and left as it was).
void invert_lower(double* l, int64_t n);

// c [m][n] (row stride ldc) -= a [m][k] (lda) · b [k][n] (ldb), float.
void gemm_sub(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc);

// c [m][n] = a [m][k] · b [k][n], double, all densely packed.
void gemm_d(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c);

// g [n][n] = xᵀ · x for x [k][n] (k rows of n features), float; both triangles are written.
// With BLAS this is one ssyrk; otherwise a loop over the lower triangle split over threads.
void gram_f(int64_t n, int64_t k, const float* x, float* g);

// True when the build uses LAPACK/BLAS.
bool have_lapack();

}  // namespace lithe::compress::detail
