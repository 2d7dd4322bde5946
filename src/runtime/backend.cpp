// The default fused ops of the Backend interface (compositions of its primitives), and
// make_backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "lithe/kernels/convert.h"
#include "lithe/runtime/backend.h"
#include "lithe/runtime/kv_cache.h"

namespace lithe {

Status check_activation(const Tensor& t, Device device, int64_t m, int64_t cols, const char* what) {
  if (t.dtype() != DType::f32 || t.device() != device || !t.is_contiguous() || t.ndim() != 2 || t.dim(0) < m ||
      (cols >= 0 && t.dim(1) != cols))
    return error(StatusCode::invalid_argument, "{}: expected a {} f32 [>= {}, {}] tensor, got {}", what,
                 device_name(device), m, cols, t.describe());
  return Status::ok();
}

Result<Tensor> Backend::prepare_quantized(const gq::Matrix& m) {
  return error(StatusCode::unsupported, "the {} backend has no kernels for {} weights [{}, {}]", name(),
               format_name(m.fmt, m.n_in), m.n_out, m.n_in);
}

Status Backend::linear_many(std::span<const Tensor* const> ws, const Tensor& x, int64_t m, std::span<Tensor*> ys) {
  if (ws.size() != ys.size())
    return error(StatusCode::invalid_argument, "linear_many: {} weights but {} outputs", ws.size(), ys.size());
  for (size_t j = 0; j < ws.size(); ++j) LITHE_TRY(linear(*ws[j], x, m, *ys[j]));
  return Status::ok();
}

Status Backend::linear_residual(const Tensor& w, const Tensor& x, int64_t m, Tensor& y, Tensor& scratch) {
  LITHE_TRY(linear(w, x, m, scratch));
  return add(y, scratch, m);
}

Status Backend::swiglu(const Tensor& w_gate, const Tensor& w_up, const Tensor& x, int64_t m, Tensor& gate,
                       Tensor& up) {
  LITHE_TRY(linear(w_gate, x, m, gate));
  LITHE_TRY(linear(w_up, x, m, up));
  return silu_mul(gate, up, m);
}

Status Backend::rmsnorm_linear_many(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x,
                                    int64_t m, std::span<Tensor*> ys) {
  if (norm.weight == nullptr || norm.scratch == nullptr)
    return error(StatusCode::invalid_argument, "rmsnorm_linear_many: the norm needs a weight and a scratch tensor");
  LITHE_TRY(rmsnorm(x, m, *norm.weight, norm.eps, *norm.scratch));
  return linear_many(ws, *norm.scratch, m, ys);
}

Status Backend::rmsnorm_swiglu(const InputNorm& norm, const Tensor& w_gate, const Tensor& w_up, const Tensor& x,
                               int64_t m, Tensor& gate, Tensor& up) {
  if (norm.weight == nullptr || norm.scratch == nullptr)
    return error(StatusCode::invalid_argument, "rmsnorm_swiglu: the norm needs a weight and a scratch tensor");
  LITHE_TRY(rmsnorm(x, m, *norm.weight, norm.eps, *norm.scratch));
  return swiglu(w_gate, w_up, *norm.scratch, m, gate, up);
}

Status Backend::rope_attention(KvCache& cache, int64_t layer, Tensor& q, Tensor& k, const Tensor& v, int64_t m,
                               const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table,
                               cpu::RopeStyle style, const AttentionShape& shape, Tensor& out) {
  if (cache.keys_pre_rope())
    return pre_rope_attention(cache, layer, q, k, v, m, q_pos, slots, table, style, shape, out);
  LITHE_TRY(rope(q, m, shape.n_heads, shape.head_dim, q_pos, table, style));
  LITHE_TRY(rope(k, m, shape.n_kv_heads, shape.head_dim, q_pos, table, style));
  return attention(cache, layer, q, k, v, m, q_pos, slots, shape, out);
}

Status Backend::check_batch(std::span<const BatchSeq> seqs, int64_t m) {
  for (const BatchSeq& s : seqs)
    if (s.cache == nullptr || s.row0 < 0 || s.n <= 0 || s.row0 + s.n > m)
      return error(StatusCode::invalid_argument, "rope_attention_batch: rows [{}, {}) of {} (and a cache) expected",
                   s.row0, s.row0 + s.n, m);
  return Status::ok();
}

Status Backend::rope_attention_batch(std::span<const BatchSeq> seqs, int64_t layer, Tensor& q, Tensor& k,
                                     const Tensor& v, int64_t m, const int32_t* q_pos, const cpu::RopeTable& table,
                                     cpu::RopeStyle style, const AttentionShape& shape, Tensor& out) {
  LITHE_TRY(check_batch(seqs, m));
  for (const BatchSeq& s : seqs) {
    LITHE_ASSIGN(Tensor qs, q.slice_rows(s.row0, s.row0 + s.n));
    LITHE_ASSIGN(Tensor ks, k.slice_rows(s.row0, s.row0 + s.n));
    LITHE_ASSIGN(Tensor vs, v.slice_rows(s.row0, s.row0 + s.n));
    LITHE_ASSIGN(Tensor os, out.slice_rows(s.row0, s.row0 + s.n));
    LITHE_TRY(rope_attention(*s.cache, layer, qs, ks, vs, s.n, q_pos + s.row0, s.slots, table, style, shape, os));
  }
  return Status::ok();
}

Status Backend::pre_rope_attention(KvCache&, int64_t, Tensor&, const Tensor&, const Tensor&, int64_t,
                                   const int32_t*, const int64_t*, const cpu::RopeTable&, cpu::RopeStyle,
                                   const AttentionShape&, Tensor&) {
  return error(StatusCode::unsupported,
               "the sink cache policy is not implemented on {} yet: use --device cpu or --cache full", name());
}

Status Backend::qkv_rope_attention(const InputNorm& norm, std::span<const Tensor* const> ws, const Tensor& x,
                                   int64_t m, std::span<Tensor*> ys, KvCache& cache, int64_t layer, const int32_t* pos,
                                   const int64_t* slots, const cpu::RopeTable& table, cpu::RopeStyle style,
                                   const AttentionShape& shape, Tensor& out, const OutProjection& o) {
  if (ws.size() != 3 || ys.size() != 3)
    return error(StatusCode::invalid_argument, "qkv_rope_attention: needs q, k, v weights and outputs, got {} and {}",
                 ws.size(), ys.size());
  LITHE_TRY(check_out_projection(o));
  LITHE_TRY(rmsnorm_linear_many(norm, ws, x, m, ys));
  LITHE_TRY(rope_attention(cache, layer, *ys[0], *ys[1], *ys[2], m, pos, slots, table, style, shape, out));
  return o.w == nullptr ? Status::ok() : linear_residual(*o.w, out, m, *o.residual, *o.scratch);
}

Status check_out_projection(const OutProjection& o) {
  if (o.w != nullptr && (o.residual == nullptr || o.scratch == nullptr))
    return error(StatusCode::invalid_argument, "qkv_rope_attention: the output projection needs a residual and a "
                 "scratch tensor");
  return Status::ok();
}

Result<const float*> Backend::host_rows(const Tensor& logits, int64_t rows, std::vector<float>& copy,
                                         const char* what) {
  const int64_t vocab = logits.dim(1);
  if (logits.device() == Device::cpu) {  // host rows are read in place
    LITHE_TRY(check_activation(logits, Device::cpu, rows, vocab, what));
    return logits.data_as<float>();
  }
  copy.resize(static_cast<size_t>(rows * vocab));  // device rows come to the host
  LITHE_TRY(to_host(logits, rows, copy.data()));
  return copy.data();
}

float log_sum_exp(const float* row, int64_t n) {
  const float mx = *std::max_element(row, row + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
  return static_cast<float>(std::log(sum)) + mx;
}

Status Backend::token_logprobs(const Tensor& logits, int64_t rows, const int32_t* targets, float* out) {
  const int64_t vocab = logits.dim(1);
  std::vector<float> copy;
  LITHE_ASSIGN(const float* all, host_rows(logits, rows, copy, "token_logprobs logits"));
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] >= vocab)
      return error(StatusCode::invalid_argument, "token_logprobs: target {} of row {} is outside the vocabulary {}",
                   targets[r], r, vocab);
    out[r] = targets[r] < 0 ? 0.0f : target_logprob(all + r * vocab, vocab, targets[r]);
  }
  return Status::ok();
}

Status Backend::top_k(const Tensor& logits, int64_t rows, int k, float* vals, int32_t* ids) {
  launched_.clear();
  return host_top_k(logits, rows, k, vals, ids);
}

Status Backend::top_k_launch(const Tensor& logits, int64_t rows, int k) {
  if (launched_.size() >= kTopKInFlight)
    return error(StatusCode::internal, "top_k_launch: {} results are already waiting to be fetched", launched_.size());
  if (rows < 0 || k <= 0) return error(StatusCode::invalid_argument, "top_k_launch: {} rows, k = {}", rows, k);
  TopK r;
  r.vals.resize(static_cast<size_t>(rows * k));
  r.ids.resize(static_cast<size_t>(rows * k));
  LITHE_TRY(host_top_k(logits, rows, k, r.vals.data(), r.ids.data()));
  launched_.push_back(std::move(r));
  return Status::ok();
}

Status Backend::top_k_fetch(std::vector<float>& vals, std::vector<int32_t>& ids) {
  if (launched_.empty()) return error(StatusCode::internal, "top_k_fetch: no top_k_launch is waiting");
  vals = std::move(launched_.front().vals);
  ids = std::move(launched_.front().ids);
  launched_.pop_front();
  return Status::ok();
}

Result<int32_t> Backend::token_id(const int32_t* ids, int64_t i, int64_t vocab) const {
  int32_t id = ids[i];
  if (id == kArgmaxToken) {
    if (static_cast<size_t>(i) >= best_ids_.size())
      return error(StatusCode::invalid_argument, "token {} asks for the argmax of row {} of the last top_k, which "
                   "had {} rows", i, i, best_ids_.size());
    id = best_ids_[static_cast<size_t>(i)];
  }
  if (id < 0 || id >= vocab)
    return error(StatusCode::invalid_argument, "token id {} is out of range for a vocabulary of {}", id, vocab);
  return id;
}

Status Backend::host_top_k(const Tensor& logits, int64_t rows, int k, float* vals, int32_t* ids) {
  const int64_t vocab = logits.dim(1);
  if (k <= 0 || k > vocab)
    return error(StatusCode::invalid_argument, "top_k: k = {} must be in 1..{} (the vocabulary)", k, vocab);
  std::vector<float> copy;
  LITHE_ASSIGN(const float* all, host_rows(logits, rows, copy, "top_k logits"));
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = all + r * vocab;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    });
    for (int i = 0; i < k; ++i) {
      ids[r * k + i] = order[static_cast<size_t>(i)];
      vals[r * k + i] = row[order[static_cast<size_t>(i)]];
    }
  }
  best_ids_.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) best_ids_[static_cast<size_t>(r)] = ids[r * k];
  return Status::ok();
}

Status Backend::fill_random(Tensor& t, uint64_t seed, float center, float scale) {
  if (t.device() != Device::cpu || !t.is_contiguous() || (t.dtype() != DType::f32 && t.dtype() != DType::f16 &&
                                                         t.dtype() != DType::bf16))
    return error(StatusCode::unsupported, "fill_random: needs a contiguous host f32/f16/bf16 tensor, got {}",
                 t.describe());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(center - scale, center + scale);
  LITHE_ASSIGN(Tensor src, Tensor::empty(DType::f32, t.shape()));
  for (int64_t i = 0; i < src.numel(); ++i) src.data_as<float>()[i] = u(rng);
  LITHE_ASSIGN(Tensor conv, convert(src, t.dtype()));
  std::memcpy(t.data(), conv.data(), t.nbytes());
  return Status::ok();
}

Result<std::unique_ptr<Backend>> make_backend(Device device) {
  if (device == Device::cpu) return make_cpu_backend();
  return make_cuda_backend();
}

#ifndef LITHE_HAVE_CUDA
Result<std::unique_ptr<Backend>> make_cuda_backend() {
  return error(StatusCode::unsupported, "this lithe was built without CUDA: use --device cpu, or rebuild on a "
               "machine with the CUDA toolkit (nvcc)");
}
#endif

}  // namespace lithe
