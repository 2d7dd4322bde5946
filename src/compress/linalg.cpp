// LAPACK/BLAS calls or plain C++ fallbacks for src/compress/linalg.h.
//
// Row-major vs column-major: a row-major [n][n] matrix is the column-major transpose, so the
// row-major lower triangle is LAPACK's 'U' triangle, and a row-major product C = A·B is the
// column-major product Cᵀ = Bᵀ·Aᵀ (sgemm with the operands swapped).
#include "linalg.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "lithe/core/thread_pool.h"

#ifdef LITHE_HAVE_LAPACK
extern "C" {
// Fortran LAPACK/BLAS (LP64). The trailing size_t arguments are the hidden lengths of the
// character arguments that gfortran-built libraries expect; C implementations ignore them.
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void dtrtri_(const char* uplo, const char* diag, const int* n, double* a, const int* lda, int* info, size_t, size_t);
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc, size_t, size_t);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, size_t, size_t);
void ssyrk_(const char* uplo, const char* trans, const int* n, const int* k, const float* alpha, const float* a,
            const int* lda, const float* beta, float* c, const int* ldc, size_t, size_t);
}
#endif

namespace lithe::compress::detail {

bool have_lapack() {
#ifdef LITHE_HAVE_LAPACK
  return true;
#else
  return false;
#endif
}

namespace {
template <typename T>
[[maybe_unused]] T dot(const T* a, const T* b, int64_t n) {
  T s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // four chains so the loop vectorizes without -ffast-math
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}
}  // namespace

bool cholesky_lower(double* a, int64_t n) {
#ifdef LITHE_HAVE_LAPACK
  const int nn = static_cast<int>(n);
  int info = 0;
  dpotrf_("U", &nn, a, &nn, &info, 1);
  if (info != 0) return false;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(a[i * n + i])) return false;
  return true;
#else
  // Right-looking blocked Cholesky: factor a diagonal block, solve the panel below it, update
  // the trailing lower triangle (the O(n^3) part, split over rows).
  constexpr int64_t nb = 64;
  for (int64_t k0 = 0; k0 < n; k0 += nb) {
    const int64_t k1 = std::min(n, k0 + nb);
    for (int64_t i = k0; i < k1; ++i) {  // unblocked factorization of the diagonal block
      for (int64_t j = k0; j <= i; ++j) {
        const double s = a[i * n + j] - dot(a + i * n + k0, a + j * n + k0, j - k0);
        if (j < i) {
          a[i * n + j] = s / a[j * n + j];
        } else {
          if (!(s > 0.0) || !std::isfinite(s)) return false;
          a[i * n + i] = std::sqrt(s);
        }
      }
    }
    if (k1 == n) break;
    global_pool().parallel_for(n - k1, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = k1 + b; i < k1 + e; ++i)  // panel: L[i][k0:k1] = A[i][k0:k1] · L_kk^-T
        for (int64_t j = k0; j < k1; ++j)
          a[i * n + j] = (a[i * n + j] - dot(a + i * n + k0, a + j * n + k0, j - k0)) / a[j * n + j];
    });
    // Trailing update of the lower triangle; row i costs ~i, so rows are dealt in pairs from
    // both ends to balance the threads.
    const int64_t rows = n - k1, pairs = (rows + 1) / 2;
    global_pool().parallel_for(pairs, 4, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t lo = k1 + p, hi = n - 1 - p;
        for (int64_t i : {lo, hi}) {
          const double* li = a + i * n + k0;
          for (int64_t j = k1; j <= i; ++j) a[i * n + j] -= dot(li, a + j * n + k0, k1 - k0);
          if (lo == hi) break;  // middle row of an odd count: only once
        }
      }
    });
  }
  return true;
#endif
}

void invert_lower(double* l, int64_t n) {
#ifdef LITHE_HAVE_LAPACK
  const int nn = static_cast<int>(n);
  int info = 0;
  dtrtri_("U", "N", &nn, l, &nn, &info, 1, 1);
  (void)info;  // only fails on a zero diagonal, which a successful Cholesky excludes
#else
  // Column j of L^-1 solves L x = e_j by forward substitution (x_i = 0 for i < j). Columns are
  // independent; they are computed into a copy, as column j reads L's rows j.. only.
  std::vector<double> x(static_cast<size_t>(n * n), 0.0);
  const int64_t pairs = (n + 1) / 2;
  global_pool().parallel_for(pairs, 1, [&](int64_t b, int64_t e) {
    std::vector<double> col(static_cast<size_t>(n));
    for (int64_t p = b; p < e; ++p) {
      const int64_t lo = p, hi = n - 1 - p;
      for (int64_t j : {lo, hi}) {
        for (int64_t i = j; i < n; ++i) {
          const double s = (i == j ? 1.0 : 0.0) - dot(l + i * n + j, col.data() + j, i - j);
          col[static_cast<size_t>(i)] = s / l[i * n + i];
        }
        for (int64_t i = j; i < n; ++i) x[static_cast<size_t>(i * n + j)] = col[static_cast<size_t>(i)];
        if (lo == hi) break;  // middle column of an odd count: only once
      }
    }
  });
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) l[i * n + j] = x[static_cast<size_t>(i * n + j)];
#endif
}

void gemm_sub(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
              int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0) return;
#ifdef LITHE_HAVE_LAPACK
  const int mm = static_cast<int>(m), nn = static_cast<int>(n), kk = static_cast<int>(k);
  const int la = static_cast<int>(lda), lb = static_cast<int>(ldb), lc = static_cast<int>(ldc);
  const float alpha = -1.0f, beta = 1.0f;
  sgemm_("N", "N", &nn, &mm, &kk, &alpha, b, &lb, a, &la, &beta, c, &lc, 1, 1);
#else
  constexpr int64_t tile = 512;  // a k x 512 tile of b stays in L2 while all rows pass over it
  for (int64_t j0 = 0; j0 < n; j0 += tile) {
    const int64_t j1 = std::min(n, j0 + tile);
    global_pool().parallel_for(m, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* cr = c + r * ldc;
        for (int64_t t = 0; t < k; ++t) {
          const float e = a[r * lda + t];
          if (e == 0.0f) continue;
          const float* bt = b + t * ldb;
          for (int64_t j = j0; j < j1; ++j) cr[j] -= e * bt[j];
        }
      }
    });
  }
#endif
}

void gemm_d(int64_t m, int64_t n, int64_t k, const double* a, const double* b, double* c) {
#ifdef LITHE_HAVE_LAPACK
  const int mm = static_cast<int>(m), nn = static_cast<int>(n), kk = static_cast<int>(k);
  const double alpha = 1.0, beta = 0.0;
  dgemm_("N", "N", &nn, &mm, &kk, &alpha, b, &nn, a, &kk, &beta, c, &nn, 1, 1);
#else
  global_pool().parallel_for(m, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      double* cr = c + r * n;
      std::fill(cr, cr + n, 0.0);
      for (int64_t t = 0; t < k; ++t) {
        const double e = a[r * k + t];
        const double* bt = b + t * n;
        for (int64_t j = 0; j < n; ++j) cr[j] += e * bt[j];
      }
    }
  });
#endif
}

void gram_f(int64_t n, int64_t k, const float* x, float* g) {
  if (n <= 0) return;
  if (k <= 0) {
    std::fill(g, g + n * n, 0.0f);
    return;
  }
#ifdef LITHE_HAVE_LAPACK
  // Row-major x [k][n] is column-major A [n][k] (lda n); C = A·Aᵀ is trans 'N'. Column-major 'L'
  // is the row-major upper triangle; the lower one is mirrored afterwards.
  const int nn = static_cast<int>(n), kk = static_cast<int>(k);
  const float alpha = 1.0f, beta = 0.0f;
  ssyrk_("L", "N", &nn, &kk, &alpha, x, &nn, &beta, g, &nn, 1, 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < i; ++j) g[i * n + j] = g[j * n + i];
#else
  // Transpose so each feature's k values are contiguous, then one dot product per lower entry.
  std::vector<float> xt(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < k; ++t)
    for (int64_t i = 0; i < n; ++i) xt[static_cast<size_t>(i * k + t)] = x[t * n + i];
  global_pool().parallel_for(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* xi = xt.data() + i * k;
      for (int64_t j = 0; j <= i; ++j) {
        g[i * n + j] = g[j * n + i] = dot(xi, xt.data() + j * k, k);
      }
    }
  });
#endif
}

}  // namespace lithe::compress::detail
