// Hessian preparation (dead inputs, dampening with retries, Cholesky factor of the inverse) and
// the reconstruction error; see include/lithe/compress/hessian.h.
#include "lithe/compress/hessian.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "linalg.h"
#include "lithe/core/log.h"

namespace lithe::compress {

std::vector<double> to_double(std::span<const float> h) { return {h.begin(), h.end()}; }

std::vector<int32_t> act_order_perm_from_diag(std::span<const double> diag) {
  std::vector<int32_t> perm(diag.size());
  std::iota(perm.begin(), perm.end(), 0);
  auto d = [&](int32_t i) {
    const double v = diag[static_cast<size_t>(i)];
    return v == 0.0 ? 1.0 : v;
  };
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return d(a) > d(b); });
  return perm;
}

std::vector<int32_t> act_order_perm(std::span<const double> h, int64_t n) {
  std::vector<double> diag(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) diag[static_cast<size_t>(i)] = h[static_cast<size_t>(i * n + i)];
  return act_order_perm_from_diag(diag);
}

Result<HessianDiagonal> inspect_hessian_diagonal(std::span<const double> diag) {
  HessianDiagonal out;
  out.dead.assign(diag.size(), 0);
  double sum = 0;
  for (size_t i = 0; i < diag.size(); ++i) {
    const double d = diag[i];
    if (!std::isfinite(d) || d < 0.0)
      return error(StatusCode::invalid_argument,
                   "Hessian diagonal H[{}][{}] = {} is negative or not finite (a Hessian 2XXᵀ has a non-negative "
                   "diagonal)", i, i, d);
    if (d == 0.0) {
      out.dead[i] = 1;
      ++out.n_dead;
    }
    sum += d == 0.0 ? 1.0 : d;
  }
  out.mean_diag = diag.empty() ? 0.0 : sum / static_cast<double>(diag.size());
  return out;
}

Status check_damp_options(const HessianOptions& opt) {
  if (!(opt.percdamp >= 0.0) || !(opt.max_percdamp >= opt.percdamp))
    return error(StatusCode::invalid_argument, "dampening {} must be >= 0 and <= max dampening {}", opt.percdamp,
                 opt.max_percdamp);
  return Status::ok();
}

Result<double> next_percdamp(double failed, int64_t n, double mean_diag, const HessianOptions& opt) {
  const double next = failed > 0.0 ? failed * 10.0 : 1e-6;
  if (next > opt.max_percdamp * (1.0 + 1e-9))
    return error(StatusCode::invalid_argument,
                 "Hessian [{}x{}] is not positive definite even with dampening {} x mean diagonal {} (requested {}, "
                 "limit {}); the calibration data is too small or degenerate",
                 n, n, failed, mean_diag, opt.percdamp, opt.max_percdamp);
  return std::min(next, opt.max_percdamp);
}

void warn_damp_raised(int64_t n, const HessianOptions& opt, double used) {
  log::warn("Hessian [{}x{}] not positive definite at dampening {}; raised to {}", n, n, opt.percdamp, used);
}

Result<PreparedHessian> prepare_hessian(std::span<const double> h, int64_t n, const HessianOptions& opt,
                                        std::span<const int32_t> perm) {
  if (n <= 0 || static_cast<int64_t>(h.size()) != n * n)
    return error(StatusCode::invalid_argument, "Hessian has {} values, [{}][{}] needs {}", h.size(), n, n, n * n);
  if (!perm.empty() && static_cast<int64_t>(perm.size()) != n)
    return error(StatusCode::invalid_argument, "permutation has {} entries, Hessian has {} columns", perm.size(), n);
  LITHE_TRY(check_damp_options(opt));
  PreparedHessian out;
  out.n = n;
  {
    std::vector<double> diag(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) diag[static_cast<size_t>(i)] = h[static_cast<size_t>(i * n + i)];
    LITHE_ASSIGN(HessianDiagonal hd, inspect_hessian_diagonal(diag));
    out.dead = std::move(hd.dead);
    out.n_dead = hd.n_dead;
    out.mean_diag = hd.mean_diag;
  }
  for (double v : h)
    if (!std::isfinite(v)) return error(StatusCode::invalid_argument, "Hessian has a non-finite entry");

  // m = P Hp P + λI with Hp the (act-order) permuted H and P the reversal, lower triangle only.
  auto src = [&](int64_t k) { return perm.empty() ? k : static_cast<int64_t>(perm[static_cast<size_t>(k)]); };
  std::vector<double> m(static_cast<size_t>(n * n));
  double frac = opt.percdamp;
  for (;;) {
    const double lambda = frac * out.mean_diag;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t oi = src(n - 1 - i);
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t oj = src(n - 1 - j);
        double v = h[static_cast<size_t>(oi * n + oj)];
        if (i == j) v = (v == 0.0 ? 1.0 : v) + lambda;
        m[static_cast<size_t>(i * n + j)] = v;
      }
    }
    if (detail::cholesky_lower(m.data(), n)) {
      out.percdamp_used = frac;
      out.damp = lambda;
      break;
    }
    LITHE_ASSIGN(frac, next_percdamp(frac, n, out.mean_diag, opt));
    ++out.damp_retries;
  }
  if (out.damp_retries > 0) warn_damp_raised(n, opt, out.percdamp_used);

  // m's lower triangle = L with P(H+λI)P = L Lᵀ, so H+λI = V Vᵀ with V = P L P upper and
  // (H+λI)^-1 = Uᵀ U with U = V^-1 = P L^-1 P.
  detail::invert_lower(m.data(), n);
  out.u.assign(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < n; ++j)
      out.u[static_cast<size_t>(i * n + j)] = static_cast<float>(m[static_cast<size_t>((n - 1 - i) * n + (n - 1 - j))]);
  return out;
}

Result<double> reconstruction_error(std::span<const float> w, std::span<const float> w_hat, std::span<const double> h,
                                    int64_t n_out, int64_t n_in) {
  const auto need = static_cast<size_t>(n_out * n_in);
  if (n_out <= 0 || n_in <= 0 || w.size() != need || w_hat.size() != need ||
      h.size() != static_cast<size_t>(n_in * n_in))
    return error(StatusCode::invalid_argument, "reconstruction_error: sizes {}, {}, {} do not fit [{}][{}]", w.size(),
                 w_hat.size(), h.size(), n_out, n_in);
  // a = [W - Ŵ; W] (2 n_out rows), y = a H, then per-row dots with a.
  std::vector<double> a(2 * need), y(2 * need);
  for (size_t i = 0; i < need; ++i) {
    a[i] = static_cast<double>(w[i]) - static_cast<double>(w_hat[i]);
    a[need + i] = w[i];
  }
  detail::gemm_d(2 * n_out, n_in, n_in, a.data(), h.data(), y.data());
  double num = 0, den = 0;
  for (size_t i = 0; i < need; ++i) {
    num += a[i] * y[i];
    den += a[need + i] * y[need + i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return num / den;
}

}  // namespace lithe::compress
