#include "lithe/runtime/kv_cache.h"

#include <atomic>

namespace lithe {

Result<KvCache> KvCache::create(int64_t n_layers, int64_t capacity, int64_t kv_dim, DType dtype, Device device) {
  if (dtype != DType::f32 && dtype != DType::f16)
    return error(StatusCode::invalid_argument, "KV cache dtype {} is not supported: use f32 or f16", dtype_name(dtype));
  if (n_layers <= 0 || capacity <= 0 || kv_dim <= 0)
    return error(StatusCode::invalid_argument, "KV cache of {} layers x {} slots x {} is empty", n_layers, capacity,
                 kv_dim);
  static std::atomic<uint64_t> next_id{1};
  KvCache c;
  c.id_ = next_id++;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  c.dtype_ = dtype;
  c.pos_.assign(static_cast<size_t>(capacity), 0);
  // One allocation for all layers (K then V per layer), so a cache that does not fit fails once,
  // with the allocator's message naming the bytes asked for and the bytes free.
  const size_t slab = static_cast<size_t>(capacity * kv_dim) * dtype_traits(dtype).block_bytes;
  auto all = Tensor::empty(dtype, {n_layers * 2, capacity, kv_dim}, device);
  if (!all) {
    const double gib = 2.0 * static_cast<double>(n_layers) * static_cast<double>(slab) / (1u << 30);
    const std::string why = all.status().message();
    return error(StatusCode::out_of_memory, "KV cache for {} tokens x {} layers ({:.2f} GiB) does not fit: {}{}",
                 capacity, n_layers, gib, why, why.find("--ctx") == std::string::npos ? "; lower --ctx" : "");
  }
  for (int64_t l = 0; l < n_layers; ++l) {
    LITHE_ASSIGN(Tensor k, Tensor::view(all->buffer(), static_cast<size_t>(2 * l) * slab, dtype, {capacity, kv_dim}));
    LITHE_ASSIGN(Tensor v, Tensor::view(all->buffer(), static_cast<size_t>(2 * l + 1) * slab, dtype, {capacity, kv_dim}));
    c.k_.push_back(std::move(k));
    c.v_.push_back(std::move(v));
  }
  if (device != Device::cpu) {
    LITHE_ASSIGN(c.pos_dev_, Tensor::empty(DType::i32, {capacity}, device));
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
