// GPTQ and SparseGPT on the GPU (solvers.h): the same steps as gptq.cpp / sparsegpt.cpp, with the
// working copy, U and the results on the device. Both share run_walk: per lazy block, (SparseGPT
// unstructured) the block's adaptive mask, the column-walk kernel (walk.cu), then the deferred
// update of the later columns as one SGEMM.
#include <algorithm>
#include <initializer_list>

#include "solvers.h"

namespace lithe::compress::cuda {
namespace {

// The widest lazy block <= min(requested, kWalkMaxBlock) that every group size (quantization or
// n:m; 0 = none) divides or is a multiple of, so that a group starting inside a block ends in it.
// Each group's grid / mask comes from fully updated weights at any width (gptq.h), so the width
// only changes rounding.
int64_t aligned_block(int64_t requested, std::initializer_list<int64_t> groups) {
  for (int64_t b = std::min<int64_t>(requested, kWalkMaxBlock); b > 1; --b) {
    bool ok = true;
    for (int64_t g : groups) ok = ok && (g <= 0 || b % g == 0 || g % b == 0);
    if (ok) return b;
  }
  return 1;
}

// One walk: kernel arguments (without the block), the working copy it updates, the block width
// and, for unstructured SparseGPT, the fraction pruned per block.
struct Walk {
  WalkArgs a;
  float* wk = nullptr;
  int64_t block = kWalkMaxBlock;
  double sparsity = -1;  // < 0: no adaptive mask
};

Status run_walk(Context& cx, const Walk& w) {
  const int64_t n_out = w.a.n_out, n = w.a.n;
  void* prune_scratch = nullptr;
  size_t prune_bytes = 0;
  if (w.sparsity >= 0) {
    prune_bytes = prune_block_scratch_bytes(n_out, w.block);
    LITHE_ASSIGN(prune_scratch, cx.buf<char>(Buf::prune, prune_bytes));
  }
  const float alpha = -1.0f, beta = 1.0f;
  for (int64_t i1 = 0; i1 < n; i1 += w.block) {
    const int64_t i2 = std::min(n, i1 + w.block), bk = i2 - i1;
    if (w.sparsity >= 0) {
      const auto k = static_cast<int64_t>(w.sparsity * static_cast<double>(n_out * bk));
      LITHE_TRY(prune_block(w.wk, w.a.u, n_out, n, i1, bk, k, w.a.mask, prune_scratch, prune_bytes, cx.stream()));
    }
    WalkArgs a = w.a;
    a.i1 = i1;
    a.bk = static_cast<int>(bk);
    LITHE_TRY(column_walk(a, cx.sms(), cx.stream()));
    if (i2 < n)  // wk[:, i2:] -= E · U[i1:i2, i2:] (column-major: wkᵀ -= U'ᵀ Eᵀ)
      LITHE_TRY(check(cublasSgemm(cx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n - i2),
                                  static_cast<int>(n_out), static_cast<int>(bk), &alpha, w.a.u + i1 * n + i2,
                                  static_cast<int>(n), w.a.err, kWalkMaxBlock, &beta, w.wk + i2, static_cast<int>(n)),
                      "cublasSgemm (lazy update)"));
  }
  return Status::ok();
}

// Working copy, result buffers and kernel arguments common to both solvers.
Status start_walk(Context& cx, const Tensor& w, Elem et, const DevicePrepared& ph, Walk& walk, Tensor& w_hat) {
  const int64_t n_out = w.dim(0), n = w.dim(1);
  const auto cells = static_cast<size_t>(n_out * n);
  LITHE_ASSIGN(walk.wk, cx.buf<float>(Buf::wk, cells));
  LITHE_TRY(load_working(w.data(), et, n_out, n, ph.perm, ph.dead, walk.wk, cx.stream()));
  LITHE_ASSIGN(w_hat, cx.tensor(DType::f32, {n_out, n}));
  WalkArgs& a = walk.a;
  a.n_out = n_out;
  a.n = n;
  a.wk = walk.wk;
  a.u = ph.u;
  a.perm = ph.perm;
  a.w_hat = w_hat.data_as<float>();
  LITHE_ASSIGN(a.err, cx.buf<float>(Buf::err, static_cast<size_t>(n_out) * kWalkMaxBlock));
  LITHE_ASSIGN(a.row_loss, cx.buf<double>(Buf::loss, static_cast<size_t>(n_out)));
  return check(cudaMemsetAsync(a.row_loss, 0, static_cast<size_t>(n_out) * sizeof(double), cx.stream()),
               "cudaMemsetAsync");
}

// Quantization arguments: codes and grid buffers for q (scales / zeros uploaded when given).
Status start_quant(Context& cx, const QuantizedMatrix& q, const QuantGrid& grid, bool grids_given, WalkArgs& a) {
  const auto cells = static_cast<size_t>(q.n_out * q.n_in), ng = q.scales.size();
  LITHE_ASSIGN(a.codes, cx.buf<uint8_t>(Buf::codes, cells));
  LITHE_ASSIGN(a.scales, cx.buf<float>(Buf::scales, ng));
  LITHE_ASSIGN(a.zeros, cx.buf<float>(Buf::zeros, ng));
  a.maxq = grid.maxq();
  a.sym = grid.sym;
  a.n_groups = q.n_groups();
  if (grids_given) {
    LITHE_TRY(cx.upload(a.scales, q.scales.data(), ng * sizeof(float)));
    LITHE_TRY(cx.upload(a.zeros, q.zeros.data(), ng * sizeof(float)));
  }
  return Status::ok();
}

// Brings codes (and grids found by the walk) back into q, and returns ½ Σ rows' losses.
Result<double> finish_walk(Context& cx, const WalkArgs& a, QuantizedMatrix* q, bool grids_found) {
  if (q != nullptr) {
    LITHE_TRY(cx.download(q->codes.data(), a.codes, q->codes.size()));
    if (grids_found) {
      LITHE_TRY(cx.download(q->scales.data(), a.scales, q->scales.size() * sizeof(float)));
      LITHE_TRY(cx.download(q->zeros.data(), a.zeros, q->zeros.size() * sizeof(float)));
    }
  }
  std::vector<double> loss(static_cast<size_t>(a.n_out));
  LITHE_TRY(cx.download(loss.data(), a.row_loss, loss.size() * sizeof(double)));
  double sum = 0;
  for (double l : loss) sum += l;
  return 0.5 * sum;
}

// W [n_out][n] with dead inputs zeroed, original order, on the host (for grids found up front).
Result<std::vector<float>> host_w0(Context& cx, const Tensor& w, Elem et, const DevicePrepared& ph, float* tmp) {
  const int64_t n_out = w.dim(0), n = w.dim(1);
  LITHE_TRY(load_working(w.data(), et, n_out, n, nullptr, ph.dead, tmp, cx.stream()));
  std::vector<float> w0(static_cast<size_t>(n_out * n));
  LITHE_TRY(cx.download(w0.data(), tmp, w0.size() * sizeof(float)));
  return w0;
}

void copy_prep_info(const DevicePrepared& ph, SolvedLinear& res) {
  res.n_dead = ph.diagonal.n_dead;
  res.percdamp_used = ph.percdamp_used;
  res.damp = ph.damp;
  res.damp_retries = ph.damp_retries;
}

Status clip_unsupported() {
  return error(StatusCode::unsupported, "the clipping search (--clip) with groups found during the walk runs on "
               "the cpu only: use --device cpu (or --static-groups with gptq)");
}

}  // namespace

Result<SolvedLinear> gptq_cuda(Context& cx, const Tensor& w, const Tensor& h, const GptqOptions& opt) {
  LITHE_ASSIGN(Elem et, weight_elem(w, "gptq weight"));
  const int64_t n_out = w.dim(0), n = w.dim(1);
  LITHE_TRY(check_hessian_tensor(h, n));
  const QuantGrid& grid = opt.grid;
  LITHE_TRY(grid.validate(n));
  if (opt.block_size <= 0)
    return error(StatusCode::invalid_argument, "GPTQ block size {} must be positive", opt.block_size);
  const int64_t gs = grid.group;
  const bool static_groups = opt.static_groups && gs > 0, dynamic = gs > 0 && !static_groups;
  if (dynamic && grid.mse) return clip_unsupported();
  LITHE_TRY(cx.sync_device());

  SolvedLinear res;
  LITHE_ASSIGN(DeviceDiagonal dd, fetch_diagonal(cx, h));
  if (opt.act_order) res.perm = act_order_perm_from_diag(dd.diag);
  LITHE_ASSIGN(DevicePrepared ph, prepare_hessian_cuda(cx, h, dd, res.perm, opt.hessian));
  copy_prep_info(ph, res);
  auto src = [&](int64_t k) { return res.perm.empty() ? k : static_cast<int64_t>(res.perm[static_cast<size_t>(k)]); };

  QuantizedMatrix q = make_quantized(n_out, n, grid);
  if (dynamic && !res.perm.empty())  // dynamic groups follow the solver order
    for (int64_t k = 0; k < n; ++k) q.g_idx[static_cast<size_t>(src(k))] = static_cast<int32_t>(k / gs);
  Walk walk;
  WalkArgs& a = walk.a;
  if (!dynamic) {  // grids known up front (per row, or static groups in original order): RTN's
    LITHE_ASSIGN(float* tmp, cx.buf<float>(Buf::wk, static_cast<size_t>(n_out * n)));
    LITHE_ASSIGN(std::vector<float> w0, host_w0(cx, w, et, ph, tmp));
    LITHE_ASSIGN(QuantizedMatrix grids, rtn(w0, n_out, n, grid));
    q.scales = std::move(grids.scales);
    q.zeros = std::move(grids.zeros);
  }
  if (static_groups) {
    std::vector<int32_t> group_at(static_cast<size_t>(n));  // group of solver position k
    for (int64_t k = 0; k < n; ++k) group_at[static_cast<size_t>(k)] = q.g_idx[static_cast<size_t>(src(k))];
    LITHE_ASSIGN(int32_t* ga, cx.buf<int32_t>(Buf::group_at, static_cast<size_t>(n)));
    LITHE_TRY(cx.upload(ga, group_at.data(), group_at.size() * sizeof(int32_t)));
    LITHE_TRY(cx.sync());  // group_at is a local
    a.group_at = ga;
  }
  Tensor w_hat;
  LITHE_TRY(start_walk(cx, w, et, ph, walk, w_hat));
  LITHE_TRY(start_quant(cx, q, grid, !dynamic, a));
  a.group = dynamic ? gs : 0;
  walk.block = aligned_block(opt.block_size, {dynamic ? gs : 0});
  LITHE_TRY(run_walk(cx, walk));
  LITHE_ASSIGN(res.loss, finish_walk(cx, a, &q, dynamic));
  res.q = std::move(q);
  res.w_hat = std::move(w_hat);
  return res;
}

Result<SolvedLinear> sparsegpt_cuda(Context& cx, const Tensor& w, const Tensor& h, const SparseGptOptions& opt) {
  LITHE_ASSIGN(Elem et, weight_elem(w, "sparsegpt weight"));
  const int64_t n_out = w.dim(0), n = w.dim(1);
  LITHE_TRY(check_hessian_tensor(h, n));
  LITHE_TRY(check_n_m(opt.prune_n, opt.prune_m, n));
  const bool nm = opt.prune_n > 0;
  if (!nm && !(opt.sparsity >= 0.0 && opt.sparsity < 1.0))
    return error(StatusCode::invalid_argument, "sparsity {} must be in [0, 1)", opt.sparsity);
  if (opt.block_size <= 0)
    return error(StatusCode::invalid_argument, "SparseGPT block size {} must be positive", opt.block_size);
  if (opt.quant) LITHE_TRY(opt.quant->validate(n));
  const bool quant = opt.quant.has_value();
  const int64_t gs = quant ? opt.quant->group : 0;
  if (gs > 0 && opt.quant->mse) return clip_unsupported();
  Walk walk;
  if (nm) {
    walk.block = aligned_block(opt.block_size, {gs, opt.prune_m});
  } else {  // the lazy block is also the mask block: its width is part of the result
    walk.block = opt.block_size;
    walk.sparsity = opt.sparsity;
    if (walk.block > kWalkMaxBlock || (gs > 0 && walk.block % gs != 0 && gs % walk.block != 0))
      return error(StatusCode::unsupported, "unstructured SparseGPT on the GPU needs a block of at most {} columns "
                   "that the group size {} divides or is a multiple of (block {}): use --device cpu",
                   kWalkMaxBlock, gs, walk.block);
  }
  LITHE_TRY(cx.sync_device());

  SolvedLinear res;
  LITHE_ASSIGN(DeviceDiagonal dd, fetch_diagonal(cx, h));
  LITHE_ASSIGN(DevicePrepared ph, prepare_hessian_cuda(cx, h, dd, {}, opt.hessian));
  copy_prep_info(ph, res);
  Tensor w_hat;
  LITHE_TRY(start_walk(cx, w, et, ph, walk, w_hat));
  WalkArgs& a = walk.a;
  const auto cells = static_cast<size_t>(n_out * n);
  LITHE_ASSIGN(a.mask, cx.buf<uint8_t>(Buf::mask, cells));
  LITHE_TRY(check(cudaMemsetAsync(a.mask, 1, cells, cx.stream()), "cudaMemsetAsync"));
  a.prune_n = static_cast<int>(opt.prune_n);
  a.prune_m = static_cast<int>(opt.prune_m);
  std::optional<QuantizedMatrix> q;
  if (quant) {
    q = make_quantized(n_out, n, *opt.quant);
    if (gs == 0) {  // one grid per row from W (dead inputs zeroed), as RTN finds it
      std::vector<float> w0(cells);
      LITHE_TRY(cx.download(w0.data(), walk.wk, cells * sizeof(float)));
      LITHE_ASSIGN(QuantizedMatrix grids, rtn(w0, n_out, n, *opt.quant));
      q->scales = std::move(grids.scales);
      q->zeros = std::move(grids.zeros);
    }
    LITHE_TRY(start_quant(cx, *q, *opt.quant, gs == 0, a));
    a.group = gs;
  }
  LITHE_TRY(run_walk(cx, walk));
  LITHE_ASSIGN(res.loss, finish_walk(cx, a, q ? &*q : nullptr, gs > 0));
  res.mask.resize(cells);
  LITHE_TRY(cx.download(res.mask.data(), a.mask, cells));
  res.q = std::move(q);
  res.w_hat = std::move(w_hat);
  return res;
}

}  // namespace lithe::compress::cuda
