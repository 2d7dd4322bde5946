// The CPU backend: activations in host memory, ops from kernels/cpu.
#include <cstring>

#include "lithe/core/half.h"
#include "lithe/kernels/ggml_quants.h"
#include "lithe/runtime/backend.h"
#include "lithe/runtime/kv_cache.h"

namespace lithe {
namespace {

Status check_f32(const Tensor& t, int64_t m, int64_t cols, const char* what) {
  return check_activation(t, Device::cpu, m, cols, what);
}

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu; }
  std::string_view name() const override { return "cpu"; }

  Result<Tensor> alloc(DType dtype, const Shape& shape) override { return Tensor::empty(dtype, shape); }
  bool supports_weight(DType dtype) const override { return cpu::linear_supports(dtype); }
  Result<Tensor> prepare_weight(const Tensor& w) override {
    if (w.ndim() == 2 && !cpu::linear_supports(w.dtype()))
      return error(StatusCode::unsupported, "the CPU backend cannot run {} weights ({}); use --dequantize",
                   dtype_name(w.dtype()), w.describe());
    return w;  // zero-copy: kernels read the mapped file directly
  }
  Result<Tensor> prepare_quantized(const gq::Matrix& m) override { return cpu::pack_gq(m); }
  Result<Tensor> add_batch_layout(const Tensor& w) override { return cpu::with_batch_layout(w); }

  Status embedding(const Tensor& table, const int32_t* ids, int64_t n, Tensor& out) override {
    const int64_t vocab = table.dim(0), d = table.dim(1);
    LITHE_TRY(check_f32(out, n, d, "embedding output"));
    const auto* base = static_cast<const uint8_t*>(table.data());
    for (int64_t i = 0; i < n; ++i) {
      LITHE_ASSIGN(const int32_t id, token_id(ids, i, vocab));
      LITHE_TRY(ref::dequantize_row(table.dtype(), base + id * table.strides()[0], out.data_as<float>() + i * d, d));
    }
    return Status::ok();
  }

  Status linear(const Tensor& w, const Tensor& x, int64_t m, Tensor& y) override {
    LITHE_TRY(check_f32(x, m, w.dim(1), "linear input"));
    LITHE_TRY(check_f32(y, m, w.dim(0), "linear output"));
    return cpu::linear(w, x.data_as<float>(), m, y.data_as<float>());
  }

  Status add_bias(Tensor& y, int64_t m, const Tensor& bias) override {
    LITHE_TRY(check_f32(y, m, bias.numel(), "bias target"));
    if (bias.dtype() != DType::f32) return error(StatusCode::unsupported, "bias must be f32, got {}", bias.describe());
    const int64_t n = bias.numel();
    for (int64_t r = 0; r < m; ++r) cpu::add_inplace(y.data_as<float>() + r * n, bias.data_as<float>(), n);
    return Status::ok();
  }

  Status rmsnorm(const Tensor& x, int64_t m, const Tensor& weight, float eps, Tensor& y) override {
    const int64_t n = weight.numel();
    LITHE_TRY(check_f32(x, m, n, "rmsnorm input"));
    LITHE_TRY(check_f32(y, m, n, "rmsnorm output"));
    if (weight.dtype() != DType::f32)
      return error(StatusCode::unsupported, "norm weight must be f32, got {}", weight.describe());
    cpu::rmsnorm(x.data_as<float>(), weight.data_as<float>(), eps, m, n, y.data_as<float>());
    return Status::ok();
  }

  Status rope(Tensor& x, int64_t m, int64_t n_heads, int64_t head_dim, const int32_t* pos,
              const cpu::RopeTable& table, cpu::RopeStyle style) override {
    LITHE_TRY(check_f32(x, m, n_heads * head_dim, "rope input"));
    cpu::rope(x.data_as<float>(), m, n_heads, head_dim, pos, table, style);
    return Status::ok();
  }

  Status silu_mul(Tensor& gate, const Tensor& up, int64_t m) override {
    LITHE_TRY(check_f32(gate, m, up.dim(1), "silu_mul gate"));
    cpu::silu_mul(gate.data_as<float>(), up.data_as<float>(), m * up.dim(1));
    return Status::ok();
  }

  Status add(Tensor& y, const Tensor& x, int64_t m) override {
    LITHE_TRY(check_f32(y, m, x.dim(1), "add target"));
    cpu::add_inplace(y.data_as<float>(), x.data_as<float>(), m * x.dim(1));
    return Status::ok();
  }

  Status attention(KvCache& cache, int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, int64_t m,
                   const int32_t* q_pos, const int64_t* slots, const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(store(cache, layer, k, v, m, slots));
    LITHE_ASSIGN(const cpu::AttentionArgs a, attention_args(cache, q.data_as<float>(), q.dim(1), m, q_pos,
                                                            cache.k(layer).data(), cache.v(layer).data(),
                                                            cache.dtype(), cache.pages(), shape, out));
    return cpu::attention(a);
  }

  // Every sequence's q and k rotated in one pass each, stored into its cache, and all attentions in
  // one parallel loop (cpu::attention_many). Rolling caches take the per-sequence path.
  Status rope_attention_batch(std::span<const BatchSeq> seqs, int64_t layer, Tensor& q, Tensor& k, const Tensor& v,
                              int64_t m, const int32_t* q_pos, const cpu::RopeTable& table, cpu::RopeStyle style,
                              const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(check_batch(seqs, m));
    for (const BatchSeq& s : seqs)
      if (s.cache->keys_pre_rope())
        return Backend::rope_attention_batch(seqs, layer, q, k, v, m, q_pos, table, style, shape, out);
    LITHE_TRY(check_f32(out, m, shape.n_heads * shape.head_dim, "attention out"));
    LITHE_TRY(rope(q, m, shape.n_heads, shape.head_dim, q_pos, table, style));
    LITHE_TRY(rope(k, m, shape.n_kv_heads, shape.head_dim, q_pos, table, style));
    std::vector<cpu::AttentionArgs> args;
    args.reserve(seqs.size());
    for (const BatchSeq& s : seqs) {
      KvCache& c = *s.cache;
      LITHE_ASSIGN(Tensor ks, k.slice_rows(s.row0, s.row0 + s.n));
      LITHE_ASSIGN(Tensor vs, v.slice_rows(s.row0, s.row0 + s.n));
      LITHE_ASSIGN(Tensor os, out.slice_rows(s.row0, s.row0 + s.n));
      LITHE_TRY(store(c, layer, ks, vs, s.n, s.slots));
      LITHE_ASSIGN(cpu::AttentionArgs a, attention_args(c, q.data_as<float>() + s.row0 * q.dim(1), q.dim(1), s.n,
                                                        q_pos + s.row0, c.k(layer).data(), c.v(layer).data(),
                                                        c.dtype(), c.pages(), shape, os));
      args.push_back(a);
    }
    return cpu::attention_many(args);
  }

  // Keys are stored as they come; the scanned slots' keys are rotated into a scratch copy at their
  // slots' positions (the values copied beside them when they are f16 or paged), then attended to.
  Status pre_rope_attention(KvCache& cache, int64_t layer, Tensor& q, const Tensor& k, const Tensor& v, int64_t m,
                            const int32_t* q_pos, const int64_t* slots, const cpu::RopeTable& table,
                            cpu::RopeStyle style, const AttentionShape& shape, Tensor& out) override {
    LITHE_TRY(rope(q, m, shape.n_heads, shape.head_dim, q_pos, table, style));
    LITHE_TRY(store(cache, layer, k, v, m, slots));
    const int64_t n = cache.size(), kv_dim = cache.kv_dim();
    rot_pos_.assign(cache.positions(), cache.positions() + n);
    for (int32_t& p : rot_pos_) p = p == KvCache::kNoPosition ? 0 : p;  // masked anyway; keeps the table in range
    rot_k_.resize(static_cast<size_t>(n * kv_dim));
    load_slots(cache, cache.k(layer), n, rot_k_.data());
    // Positions stay below the cache's capacity, and the table is the model's: its angles are
    // computed once, not per key, layer and step.
    if (angles_inv_freq_ != table.inv_freq || angles_rot_ != table.rot_dim || angles_pos_ < cache.capacity()) {
      angles_ = cpu::rope_angles(table, cache.capacity());
      angles_inv_freq_ = table.inv_freq;
      angles_rot_ = table.rot_dim;
      angles_pos_ = cache.capacity();
    }
    cpu::rope_lookup(rot_k_.data(), n, shape.n_kv_heads, shape.head_dim, rot_pos_.data(), table, angles_.data(),
                     style);
    const void* vals = cache.v(layer).data();
    if (cache.dtype() != DType::f32 || cache.paged()) {
      rot_v_.resize(static_cast<size_t>(n * kv_dim));
      load_slots(cache, cache.v(layer), n, rot_v_.data());
      vals = rot_v_.data();
    }
    LITHE_ASSIGN(const cpu::AttentionArgs a, attention_args(cache, q.data_as<float>(), q.dim(1), m, q_pos,
                                                            rot_k_.data(), vals, DType::f32, KvPages{}, shape, out));
    return cpu::attention(a);
  }

  Status to_host(const Tensor& x, int64_t m, float* dst) override {
    LITHE_TRY(check_f32(x, m, -1, "to_host"));
    std::memcpy(dst, x.data(), static_cast<size_t>(m * x.dim(1)) * sizeof(float));
    return Status::ok();
  }

 private:
  // Writes the m new K/V rows into the cache slots (at their rows).
  static Status store(KvCache& cache, int64_t layer, const Tensor& k, const Tensor& v, int64_t m,
                      const int64_t* slots) {
    const int64_t kv_dim = cache.kv_dim();
    LITHE_TRY(check_f32(k, m, kv_dim, "attention k"));
    LITHE_TRY(check_f32(v, m, kv_dim, "attention v"));
    const KvPages pages = cache.pages();
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = pages.row(slots[i]);
      store_row(cache.dtype(), k.data_as<float>() + i * kv_dim, cache.k(layer), row, kv_dim);
      store_row(cache.dtype(), v.data_as<float>() + i * kv_dim, cache.v(layer), row, kv_dim);
    }
    return Status::ok();
  }

  // Causal attention of m query rows q (q_cols = n_heads * head_dim floats each) over the cache's
  // scanned slots, K/V read from k / v (rows [][kv_dim] of dtype, slot s at row pages.row(s)).
  static Result<cpu::AttentionArgs> attention_args(const KvCache& cache, const float* q, int64_t q_cols, int64_t m,
                                                   const int32_t* q_pos, const void* k, const void* v, DType dtype,
                                                   KvPages pages, const AttentionShape& shape, Tensor& out) {
    const int64_t kv_dim = cache.kv_dim();
    if (shape.n_kv_heads * shape.head_dim != kv_dim || q_cols != shape.n_heads * shape.head_dim)
      return error(StatusCode::invalid_argument, "attention: {} heads x {} and {} kv heads do not match q rows of {} / "
                   "cache {}", shape.n_heads, shape.head_dim, shape.n_kv_heads, q_cols, kv_dim);
    cpu::AttentionArgs a{};
    a.q = q;
    a.n_q = m;
    a.q_pos = q_pos;
    a.k = k;
    a.v = v;
    a.kv_dtype = dtype;
    a.n_kv = cache.size();
    a.kv_pos = cache.positions();
    a.kv_row_stride = kv_dim;
    a.head_dim = shape.head_dim;
    a.n_kv_heads = shape.n_kv_heads;
    a.n_heads = shape.n_heads;
    a.scale = shape.scale;
    a.out = out.data_as<float>();
    a.pages = pages;
    return a;
  }

  // n values of an f32 or f16 buffer as f32.
  static void load_rows(DType dt, const void* src, int64_t n, float* dst) {
    if (dt == DType::f32) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    } else {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
    }
  }

  // Slots [0, n) of a cache slab (K or V of one layer) as f32 rows in slot order.
  static void load_slots(const KvCache& cache, const Tensor& slab, int64_t n, float* dst) {
    const int64_t kv_dim = cache.kv_dim(), esz = cache.dtype() == DType::f32 ? 4 : 2;
    if (!cache.paged()) return load_rows(cache.dtype(), slab.data(), n * kv_dim, dst);
    const KvPages pages = cache.pages();
    const auto* base = static_cast<const uint8_t*>(slab.data());
    for (int64_t s = 0; s < n; ++s)
      load_rows(cache.dtype(), base + pages.row(s) * kv_dim * esz, kv_dim, dst + s * kv_dim);
  }

  static void store_row(DType dt, const float* src, Tensor& cache, int64_t row, int64_t n) {
    if (dt == DType::f32) {
      std::memcpy(cache.data_as<float>() + row * n, src, static_cast<size_t>(n) * sizeof(float));
    } else {
      uint16_t* dst = cache.data_as<uint16_t>() + row * n;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
    }
  }

  std::vector<float> rot_k_, rot_v_;  // pre_rope_attention's rotated keys / f32 values
  std::vector<int32_t> rot_pos_;
  std::vector<float> angles_, angles_inv_freq_;  // rope_angles() of positions [0, angles_pos_) for that table
  int64_t angles_pos_ = 0, angles_rot_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }


}  // namespace lithe
