#include "lithe/runtime/kv_cache.h"

#include <algorithm>
#include <atomic>

namespace lithe {

Result<KvCache> KvCache::make(int64_t capacity, int64_t kv_dim, DType dtype, Device device) {
  static std::atomic<uint64_t> next_id{1};
  KvCache c;
  c.id_ = next_id++;
  c.capacity_ = capacity;
  c.kv_dim_ = kv_dim;
  c.dtype_ = dtype;
  c.pos_.assign(static_cast<size_t>(capacity), 0);
  if (device != Device::cpu) {
    LITHE_ASSIGN(c.pos_dev_, Tensor::empty(DType::i32, {capacity}, device));
  }
  return c;
}

Result<KvCache> KvCache::create(int64_t n_layers, int64_t capacity, int64_t kv_dim, DType dtype, Device device) {
  std::vector<Tensor> k, v;
  LITHE_TRY(make_kv_slabs(n_layers, capacity, kv_dim, dtype, device, fmt::format("KV cache for {} tokens", capacity),
                          "lower --ctx", k, v));
  LITHE_ASSIGN(KvCache c, make(capacity, kv_dim, dtype, device));
  c.k_ = std::move(k);
  c.v_ = std::move(v);
  return c;
}

Result<KvCache> KvCache::create_paged(std::shared_ptr<KvPool> pool, int64_t capacity) {
  if (pool == nullptr) return error(StatusCode::invalid_argument, "paged KV cache: no pool");
  if (capacity < 1 || capacity > (int64_t{1} << 30))
    return error(StatusCode::invalid_argument, "paged KV cache of {} slots: must be in [1, 2^30]", capacity);
  LITHE_ASSIGN(KvCache c, make(capacity, pool->kv_dim(), pool->dtype(), pool->device()));
  for (int64_t l = 0; l < pool->n_layers(); ++l) {
    c.k_.push_back(pool->k(l));
    c.v_.push_back(pool->v(l));
  }
  c.blocks_ = KvBlockTable(std::move(pool));
  return c;
}

namespace {
Status check_rolling(int64_t sinks, int64_t window) {
  if (sinks < 0) return error(StatusCode::invalid_argument, "--sinks {} must be >= 0", sinks);
  if (window < 1) return error(StatusCode::invalid_argument, "--window {} must be >= 1", window);
  return Status::ok();
}
}  // namespace

Result<KvCache> KvCache::create_rolling(int64_t n_layers, int64_t sinks, int64_t window, int64_t kv_dim, DType dtype,
                                        Device device) {
  LITHE_TRY(check_rolling(sinks, window));
  LITHE_ASSIGN(KvCache c, create(n_layers, sinks + window, kv_dim, dtype, device));
  c.rolling_ = true;
  c.sinks_ = sinks;
  c.window_ = window;
  return c;
}

Result<KvCache> KvCache::create_paged_rolling(std::shared_ptr<KvPool> pool, int64_t sinks, int64_t window) {
  LITHE_TRY(check_rolling(sinks, window));
  LITHE_ASSIGN(KvCache c, create_paged(std::move(pool), sinks + window));
  c.rolling_ = true;
  c.sinks_ = sinks;
  c.window_ = window;
  return c;
}

int64_t KvCache::slots_after(int64_t m) const {
  if (!rolling_) return std::min(capacity_, size_ + m);
  // Sinks fill first, then ring slots in order; a ring never reaches past its first unused slot.
  return std::min(capacity_, std::max(size_, seen_ + m));
}

int64_t KvCache::max_blocks() const { return paged() ? blocks_.pool()->blocks_for(capacity_) : 0; }

int64_t KvCache::blocks_to_append(int64_t m) const {
  if (!paged()) return 0;
  return std::max<int64_t>(0, blocks_.pool()->blocks_for(slots_after(m)) - blocks_.size());
}

bool KvCache::reserve(int64_t n) {
  if (!paged()) return true;
  return blocks_.grow(blocks_.pool()->blocks_for(std::min(n, capacity_)) - blocks_.size());
}

KvPages KvCache::pages() const {
  if (!paged()) return {};
  return {blocks_.ids().data(), static_cast<int32_t>(blocks_.pool()->block_size())};
}

size_t KvCache::bytes() const {
  if (paged()) {
    const KvPool& p = *blocks_.pool();
    return p.bytes() / static_cast<size_t>(p.num_blocks()) * static_cast<size_t>(blocks_.size());
  }
  size_t b = 0;
  for (size_t i = 0; i < k_.size(); ++i) b += k_[i].nbytes() + v_[i].nbytes();
  return b;
}

Result<std::vector<int64_t>> KvCache::append(const int32_t* pos, int64_t m) {
  std::vector<int64_t> slots(static_cast<size_t>(m));
  if (paged() && !reserve(slots_after(m))) {
    const KvPool& p = *blocks_.pool();
    return error(StatusCode::out_of_memory,
                 "the KV pool is out of blocks: {} new tokens need {} more blocks of {} tokens, {} of {} are free "
                 "(start with more --kv-blocks)",
                 m, blocks_to_append(m), p.block_size(), p.num_free(), p.num_blocks());
  }
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
  blocks_.release();
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
