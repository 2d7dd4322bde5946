#include "lithe/runtime/kv_cache.h"

#include <algorithm>
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

Result<KvCache> KvCache::create_rolling(int64_t n_layers, int64_t sinks, int64_t window, int64_t kv_dim, DType dtype,
                                        Device device) {
  if (sinks < 0) return error(StatusCode::invalid_argument, "--sinks {} must be >= 0", sinks);
  if (window < 1) return error(StatusCode::invalid_argument, "--window {} must be >= 1", window);
  LITHE_ASSIGN(KvCache c, create(n_layers, sinks + window, kv_dim, dtype, device));
  c.rolling_ = true;
  c.sinks_ = sinks;
  c.window_ = window;
  return c;
}

size_t KvCache::bytes() const {
  size_t b = 0;
  for (size_t i = 0; i < k_.size(); ++i) b += k_[i].nbytes() + v_[i].nbytes();
  return b;
}

Result<std::vector<int64_t>> KvCache::append(const int32_t* pos, int64_t m) {
  std::vector<int64_t> slots(static_cast<size_t>(m));
  if (rolling_) {
    if (m > window_)
      return error(StatusCode::invalid_argument,
                   "{} tokens at once exceed the cache window of {}: run them in chunks of at most {}", m, window_,
                   window_);
    for (int64_t i = 0; i < m; ++i) {
      if (n_sink_ < sinks_ && n_win_ == 0) {  // the stream's first tokens become the sinks
        slots[static_cast<size_t>(i)] = n_sink_++;
      } else {
        if (n_win_ == window_) {  // evict the oldest ring token
          head_ = (head_ + 1) % window_;
          --n_win_;
        }
        const int64_t r = (head_ + n_win_) % window_;
        slots[static_cast<size_t>(i)] = sinks_ + r;
        ++n_win_;
        ring_used_ = std::max(ring_used_, r + 1);
      }
    }
    seen_ += m;
    reindex();
    return slots;
  }
  if (size_ + m > capacity_)
    return error(StatusCode::invalid_argument,
                 "context full: {} tokens cached + {} new exceed the context of {} tokens (raise --ctx)", size_, m,
                 capacity_);
  for (int64_t i = 0; i < m; ++i) {
    slots[static_cast<size_t>(i)] = size_ + i;
    pos_[static_cast<size_t>(size_ + i)] = pos[i];
  }
  size_ += m;
  return slots;
}

void KvCache::clear() {
  size_ = seen_ = n_sink_ = head_ = n_win_ = ring_used_ = 0;
}

int64_t KvCache::rewind(int64_t n) {
  n = std::max<int64_t>(0, n);
  if (!rolling_) {
    size_ = std::min(size_, n);
    return size_;
  }
  if (n >= seen_) return seen_;
  const int64_t drop = seen_ - n;
  if (drop <= n_win_) {  // the newest ring tokens go; their slots are refilled next
    n_win_ -= drop;
  } else if (seen_ == n_sink_ + n_win_) {  // nothing evicted yet: keep a prefix of the sinks
    n_sink_ = n;
    head_ = n_win_ = ring_used_ = 0;
  } else {
    clear();
    return 0;
  }
  seen_ = n;
  reindex();
  return seen_;
}

void KvCache::reindex() {
  for (int64_t s = 0; s < sinks_; ++s)
    pos_[static_cast<size_t>(s)] = s < n_sink_ ? static_cast<int32_t>(s) : kNoPosition;
  for (int64_t r = 0; r < ring_used_; ++r) {
    const int64_t o = (r - head_ + window_) % window_;  // age rank: 0 = oldest
    pos_[static_cast<size_t>(sinks_ + r)] = o < n_win_ ? static_cast<int32_t>(n_sink_ + o) : kNoPosition;
  }
  size_ = ring_used_ > 0 ? sinks_ + ring_used_ : n_sink_;
}

}  // namespace lithe
