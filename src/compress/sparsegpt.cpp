// SparseGPT column walk and magnitude pruning; see include/lithe/compress/sparsegpt.h.
#include "lithe/compress/sparsegpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "column_walk.h"
#include "linalg.h"
#include "lithe/core/thread_pool.h"

namespace lithe::compress {

namespace {
// Indices of the k smallest scores (ties: lower index first), in no particular order.
void k_smallest(const std::vector<float>& score, int64_t k, std::vector<int64_t>& idx) {
  idx.resize(score.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  if (k <= 0) {
    idx.clear();
    return;
  }
  auto less = [&](int64_t a, int64_t b) {
    const float sa = score[static_cast<size_t>(a)], sb = score[static_cast<size_t>(b)];
    return sa < sb || (sa == sb && a < b);
  };
  if (k < static_cast<int64_t>(idx.size())) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), less);
  idx.resize(static_cast<size_t>(k));
}

// The n lowest of m scores (ties: lower index first) get keep[i] = 0.
void prune_n_of_m(const float* score, int64_t n, int64_t m, uint8_t* keep) {
  int64_t order[64];
  std::iota(order, order + m, int64_t{0});
  std::partial_sort(order, order + n, order + m, [&](int64_t a, int64_t b) {
    return score[a] < score[b] || (score[a] == score[b] && a < b);
  });
  for (int64_t i = 0; i < n; ++i) keep[order[i]] = 0;
}
}  // namespace

Status check_n_m(int64_t n, int64_t m, int64_t n_in) {
  if (n == 0 && m == 0) return Status::ok();
  if (n <= 0 || m <= n || m > 64)
    return error(StatusCode::invalid_argument, "bad n:m sparsity {}:{} (need 0 < n < m <= 64)", n, m);
  if (n_in % m != 0)
    return error(StatusCode::invalid_argument, "n:m sparsity {}:{}: m = {} does not divide n_in {}", n, m, m, n_in);
  return Status::ok();
}

Result<SparseGptResult> sparsegpt(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const float> h,
                                  const SparseGptOptions& opt) {
  const std::vector<double> hd = to_double(h);
  return sparsegpt(w, n_out, n_in, std::span<const double>(hd), opt);
}

Result<SparseGptResult> sparsegpt(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const double> h,
                                  const SparseGptOptions& opt) {
  LITHE_TRY(check_matrix(w, n_out, n_in));
  LITHE_TRY(check_n_m(opt.prune_n, opt.prune_m, n_in));
  const bool nm = opt.prune_n > 0;
  if (!nm && !(opt.sparsity >= 0.0 && opt.sparsity < 1.0))
    return error(StatusCode::invalid_argument, "sparsity {} must be in [0, 1)", opt.sparsity);
  if (opt.block_size <= 0)
    return error(StatusCode::invalid_argument, "SparseGPT block size {} must be positive", opt.block_size);
  if (opt.quant) LITHE_TRY(opt.quant->validate(n_in));
  const int64_t n = n_in, bs = opt.block_size, pn = opt.prune_n, pm = opt.prune_m;

  LITHE_ASSIGN(PreparedHessian ph, prepare_hessian(h, n, opt.hessian));
  SparseGptResult res;
  res.n_dead = ph.n_dead;
  res.percdamp_used = ph.percdamp_used;
  res.damp = ph.damp;
  res.damp_retries = ph.damp_retries;

  std::vector<float> wk(w.begin(), w.end());  // working copy; becomes the result column by column
  for (int64_t c = 0; c < n; ++c)
    if (ph.dead[static_cast<size_t>(c)])
      for (int64_t r = 0; r < n_out; ++r) wk[static_cast<size_t>(r * n + c)] = 0.0f;
  res.mask.assign(wk.size(), 1);

  const QuantGrid grid = opt.quant.value_or(QuantGrid{});
  const bool quant = opt.quant.has_value();
  const int64_t gs = quant ? grid.group : 0;
  const int maxq = grid.maxq();
  if (quant) {
    res.q = make_quantized(n_out, n, grid);
    if (gs == 0)
      for (int64_t r = 0; r < n_out; ++r) {
        const GridParams p = find_params(grid, wk.data() + r * n, n);
        res.q->scales[static_cast<size_t>(r)] = p.scale;
        res.q->zeros[static_cast<size_t>(r)] = p.zero;
      }
  }
  const int64_t ng = quant ? res.q->n_groups() : 1;

  const float* u = ph.u.data();
  std::vector<float> err(static_cast<size_t>(n_out * bs));
  std::vector<double> row_loss(static_cast<size_t>(n_out), 0.0);
  std::vector<float> score;
  std::vector<int64_t> idx;
  for (int64_t i1 = 0; i1 < n; i1 += bs) {
    const int64_t i2 = std::min(n, i1 + bs), bk = i2 - i1;
    if (!nm) {  // adaptive mask for the whole block from the weights at block start
      const auto k = static_cast<int64_t>(opt.sparsity * static_cast<double>(n_out * bk));
      if (k > 0) {
        score.resize(static_cast<size_t>(n_out * bk));
        for (int64_t r = 0; r < n_out; ++r)
          for (int64_t c = 0; c < bk; ++c) {
            const float x = wk[static_cast<size_t>(r * n + i1 + c)], d = u[(i1 + c) * n + i1 + c];
            score[static_cast<size_t>(r * bk + c)] = x * x / (d * d);
          }
        k_smallest(score, k, idx);
        for (int64_t t : idx) res.mask[static_cast<size_t>((t / bk) * n + i1 + t % bk)] = 0;
      }
    }
    global_pool().parallel_for(n_out, 4, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(static_cast<size_t>(std::max<int64_t>({gs, pm, 1})));
      for (int64_t r = r0; r < r1; ++r) {
        float* row = wk.data() + r * n;
        float* e_row = err.data() + r * bs;
        uint8_t* keep = res.mask.data() + r * n;
        double loss = 0;
        for (int64_t j = i1; j < i2; ++j) {
          if (nm && j % pm == 0) {  // n:m group: score the current weights of its m columns
            detail::gather_current(row, e_row, u, n, i1, i2, j - i1, j, j + pm, buf.data());
            for (int64_t c = 0; c < pm; ++c) {
              const float d = u[(j + c) * n + j + c];
              buf[static_cast<size_t>(c)] = buf[static_cast<size_t>(c)] * buf[static_cast<size_t>(c)] / (d * d);
            }
            prune_n_of_m(buf.data(), pn, pm, keep + j);
          }
          GridParams p;
          size_t pi = 0;
          if (quant) {
            pi = static_cast<size_t>(r * ng + (gs ? j / gs : 0));
            if (gs > 0 && j % gs == 0) {
              const int64_t len = grid.group_len(j, n);
              detail::gather_current(row, e_row, u, n, i1, i2, j - i1, j, j + len, buf.data());
              p = find_params(grid, buf.data(), len);
              res.q->scales[pi] = p.scale;
              res.q->zeros[pi] = p.zero;
            }
            p = {res.q->scales[pi], res.q->zeros[pi]};
          }
          const float x = row[j];
          float qv = 0.0f;
          if (keep[j]) qv = quant ? quantize_value(x, p, maxq) : x;
          if (quant) res.q->codes[static_cast<size_t>(r * n + j)] = static_cast<uint8_t>(quantize_code(qv, p, maxq));
          const float e = (x - qv) / u[j * n + j];
          row[j] = qv;
          e_row[j - i1] = e;
          loss += static_cast<double>(e) * e;
          if (e != 0.0f) detail::update_in_block(row, e, u, n, j, i2);
        }
        row_loss[static_cast<size_t>(r)] += loss;
      }
    });
    detail::gemm_sub(n_out, n - i2, bk, err.data(), bs, u + i1 * n + i2, n, wk.data() + i2, n);
  }
  res.w = std::move(wk);
  for (double l : row_loss) res.loss += l;
  res.loss *= 0.5;
  return res;
}

Result<PruneResult> prune_magnitude(std::span<const float> w, int64_t n_out, int64_t n_in, const MagnitudeOptions& opt) {
  LITHE_TRY(check_matrix(w, n_out, n_in));
  LITHE_TRY(check_n_m(opt.prune_n, opt.prune_m, n_in));
  if (opt.prune_n == 0 && !(opt.sparsity >= 0.0 && opt.sparsity < 1.0))
    return error(StatusCode::invalid_argument, "sparsity {} must be in [0, 1)", opt.sparsity);
  PruneResult res;
  res.w.assign(w.begin(), w.end());
  res.mask.assign(w.size(), 1);
  if (opt.prune_n > 0) {
    std::vector<float> s(static_cast<size_t>(opt.prune_m));
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t c = 0; c < n_in; c += opt.prune_m) {
        for (int64_t t = 0; t < opt.prune_m; ++t) s[static_cast<size_t>(t)] = std::fabs(w[static_cast<size_t>(r * n_in + c + t)]);
        prune_n_of_m(s.data(), opt.prune_n, opt.prune_m, res.mask.data() + r * n_in + c);
      }
  } else {
    const int64_t len = opt.scope == MagnitudeScope::matrix ? n_out * n_in : n_in;
    std::vector<float> s(static_cast<size_t>(len));
    std::vector<int64_t> idx;
    const auto k = static_cast<int64_t>(opt.sparsity * static_cast<double>(len));
    for (int64_t base = 0; base < n_out * n_in; base += len) {
      for (int64_t t = 0; t < len; ++t) s[static_cast<size_t>(t)] = std::fabs(w[static_cast<size_t>(base + t)]);
      k_smallest(s, k, idx);
      for (int64_t t : idx) res.mask[static_cast<size_t>(base + t)] = 0;
    }
  }
  for (size_t i = 0; i < res.w.size(); ++i)
    if (!res.mask[i]) res.w[i] = 0.0f;
  return res;
}

}  // namespace lithe::compress
