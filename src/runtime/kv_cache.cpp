#include "lithe/runtime/kv_cache.h"

namespace lithe {

Result<KvCache> KvCache::create(int64_t n_layers, int64_t capacity, int64_t kv_dim, DType dtype, Device device) {
  if (dtype != DType::f32 && dtype != DType::f16)
    return error(StatusCode::invalid_argument, "KV cache dtype {} is not supported: use f32 or f16", dtype_name(dtype));
  if (n_layers <= 0 || capacity <= 0 || kv_dim <= 0)
    return error(StatusCode::invalid_argument, "KV cache of {} layers x {} slots x {} is empty", n_layers, capacity,
                 kv_dim);
  KvCache c;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  c.dtype_ = dtype;
  c.pos_.assign(static_cast<size_t>(capacity), 0);
  for (int64_t l = 0; l < n_layers; ++l) {
    auto k = Tensor::empty(dtype, {capacity, kv_dim}, device);
    auto v = Tensor::empty(dtype, {capacity, kv_dim}, device);
    if (!k || !v) {
      const double gib = 2.0 * static_cast<double>(n_layers * capacity * kv_dim * dtype_traits(dtype).block_bytes) /
                         (1u << 30);
      return error(StatusCode::out_of_memory, "KV cache for {} tokens ({:.2f} GiB) does not fit: {}; lower --ctx",
                   capacity, gib, (!k ? k.status() : v.status()).message());
    }
    c.k_.push_back(std::move(*k));
    c.v_.push_back(std::move(*v));
  }
  return c;
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (size_t i = 0; i < k_.size(); ++i) b += k_[i].nbytes() + v_[i].nbytes();
  return b;
}

Result<std::vector<int64_t>> KvCache::append(const int32_t* pos, int64_t m) {
  if (size_ + m > capacity_)
    return error(StatusCode::invalid_argument,
                 "context full: {} tokens cached + {} new exceed the context of {} tokens (raise --ctx)", size_, m,
                 capacity_);
  std::vector<int64_t> slots(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    slots[static_cast<size_t>(i)] = size_ + i;
    pos_[static_cast<size_t>(size_ + i)] = pos[i];
  }
  size_ += m;
  return slots;
}

}  // namespace lithe
