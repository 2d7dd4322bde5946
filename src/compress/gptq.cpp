// GPTQ column walk; see include/lithe/compress/gptq.h for the algorithm and conventions.
#include "lithe/compress/gptq.h"

#include <algorithm>

#include "column_walk.h"
#include "linalg.h"
#include "lithe/core/thread_pool.h"

namespace lithe::compress {

Result<GptqResult> gptq(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const float> h,
                        const GptqOptions& opt) {
  const std::vector<double> hd = to_double(h);
  return gptq(w, n_out, n_in, std::span<const double>(hd), opt);
}

Result<GptqResult> gptq(std::span<const float> w, int64_t n_out, int64_t n_in, std::span<const double> h,
                        const GptqOptions& opt) {
  LITHE_TRY(check_matrix(w, n_out, n_in));
  const QuantGrid& grid = opt.grid;
  LITHE_TRY(grid.validate(n_in));
  if (opt.block_size <= 0)
    return error(StatusCode::invalid_argument, "GPTQ block size {} must be positive", opt.block_size);
  const int64_t n = n_in, bs = opt.block_size, gs = grid.group;
  const bool static_groups = opt.static_groups && gs > 0;

  GptqResult res;
  if (opt.act_order) res.perm = act_order_perm(h, n);
  LITHE_ASSIGN(PreparedHessian ph, prepare_hessian(h, n, opt.hessian, res.perm));
  res.n_dead = ph.n_dead;
  res.percdamp_used = ph.percdamp_used;
  res.damp = ph.damp;
  res.damp_retries = ph.damp_retries;
  auto src = [&](int64_t k) { return res.perm.empty() ? k : static_cast<int64_t>(res.perm[static_cast<size_t>(k)]); };

  // W with dead inputs zeroed (original order), and the working copy in solver order.
  std::vector<float> w0(w.begin(), w.end());
  for (int64_t c = 0; c < n; ++c)
    if (ph.dead[static_cast<size_t>(c)])
      for (int64_t r = 0; r < n_out; ++r) w0[static_cast<size_t>(r * n + c)] = 0.0f;
  std::vector<float> wk(w0.size());
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t k = 0; k < n; ++k) wk[static_cast<size_t>(r * n + k)] = w0[static_cast<size_t>(r * n + src(k))];

  QuantizedMatrix& q = res.q;
  q = make_quantized(n_out, n, grid);
  const int64_t ng = q.n_groups();
  if (gs > 0 && !static_groups && !res.perm.empty())  // dynamic groups follow the solver order
    for (int64_t k = 0; k < n; ++k) q.g_idx[static_cast<size_t>(src(k))] = static_cast<int32_t>(k / gs);
  // Grids known up front: per row, or static groups (original order).
  if (gs == 0 || static_groups) {
    const int64_t len = gs ? gs : n;
    global_pool().parallel_for(n_out, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t g = 0; g < ng; ++g) {
          const GridParams p = find_params(grid, w0.data() + r * n + g * len, std::min(len, n - g * len));
          q.scales[static_cast<size_t>(r * ng + g)] = p.scale;
          q.zeros[static_cast<size_t>(r * ng + g)] = p.zero;
        }
    });
  }
  std::vector<int32_t> group_at(static_cast<size_t>(n));  // group of solver position k
  for (int64_t k = 0; k < n; ++k) group_at[static_cast<size_t>(k)] = q.g_idx[static_cast<size_t>(src(k))];

  const float* u = ph.u.data();
  const int maxq = grid.maxq();
  std::vector<float> err(static_cast<size_t>(n_out * bs));
  std::vector<double> row_loss(static_cast<size_t>(n_out), 0.0);
  for (int64_t i1 = 0; i1 < n; i1 += bs) {
    const int64_t i2 = std::min(n, i1 + bs);
    global_pool().parallel_for(n_out, 4, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(gs, 1)));
      for (int64_t r = r0; r < r1; ++r) {
        float* row = wk.data() + r * n;
        float* e_row = err.data() + r * bs;
        double loss = 0;
        for (int64_t j = i1; j < i2; ++j) {
          const int64_t g = group_at[static_cast<size_t>(j)];
          const size_t pi = static_cast<size_t>(r * ng + g);
          if (gs > 0 && !static_groups && j % gs == 0) {  // new group: grid from current weights
            const int64_t len = grid.group_len(j, n);
            detail::gather_current(row, e_row, u, n, i1, i2, j - i1, j, j + len, buf.data());
            const GridParams p = find_params(grid, buf.data(), len);
            q.scales[pi] = p.scale;
            q.zeros[pi] = p.zero;
          }
          const GridParams p{q.scales[pi], q.zeros[pi]};
          const float x = row[j];
          const int code = quantize_code(x, p, maxq);
          const float qv = dequantize_code(code, p);
          const float e = (x - qv) / u[j * n + j];
          q.codes[static_cast<size_t>(r * n + src(j))] = static_cast<uint8_t>(code);
          row[j] = qv;  // the working copy becomes Q column by column
          e_row[j - i1] = e;
          loss += static_cast<double>(e) * e;
          detail::update_in_block(row, e, u, n, j, i2);
        }
        row_loss[static_cast<size_t>(r)] += loss;
      }
    });
    // Deferred update of all later columns: wk[:, i2:] -= E · U[i1:i2, i2:].
    detail::gemm_sub(n_out, n - i2, i2 - i1, err.data(), bs, u + i1 * n + i2, n, wk.data() + i2, n);
  }

  res.w_hat.resize(wk.size());
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t k = 0; k < n; ++k) res.w_hat[static_cast<size_t>(r * n + src(k))] = wk[static_cast<size_t>(r * n + k)];
  for (double l : row_loss) res.loss += l;
  res.loss *= 0.5;
  return res;
}

}  // namespace lithe::compress
