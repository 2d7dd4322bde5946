// The paged KV store that many sequences share (the server): for every layer one K and one V slab
// of num_blocks * block_size rows ([rows][kv_dim], f32 or f16, on one device), made in a single
// allocation, and the free list of its blocks. A paged KvCache (KvCache::create_paged) owns a
// block table of ids into it, takes blocks as its sequence grows (reserve) and gives them back
// when it is cleared or destroyed; its slot s lives at row KvPages::row(s) (kernels/kv_pages.h).
// Memory is taken once, when the pool is made; sequences then come and go without allocating.
// Not thread-safe: one scheduler owns a pool and its caches.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "lithe/core/tensor.h"

namespace lithe {

class KvPool {
 public:
  // Errors name the bytes asked for and what to lower.
  static Result<std::shared_ptr<KvPool>> create(int64_t n_layers, int64_t num_blocks, int64_t block_size,
                                                int64_t kv_dim, DType dtype, Device device = Device::cpu);
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }
  // Blocks that hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Takes n blocks, appending their ids to `table`; false (and nothing taken) when fewer are free.
  bool allocate(int64_t n, std::vector<int32_t>& table);
  // Returns every block of `table` to the pool and clears it.
  void release(std::vector<int32_t>& table);

  // Per layer: [num_blocks * block_size, kv_dim].
  Tensor& k(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  Tensor& v(int64_t layer) { return v_[static_cast<size_t>(layer)]; }

 private:
  KvPool() = default;
  std::vector<Tensor> k_, v_;
  std::vector<int32_t> free_;  // a stack: recently freed blocks are reused first
  int64_t block_size_ = 1, num_blocks_ = 0, kv_dim_ = 0;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  size_t bytes_ = 0;
};

// The block table of one paged cache: ids of the pool's blocks it holds, given back to the pool
// when the table is released, assigned over or destroyed (a move carries the blocks along).
class KvBlockTable {
 public:
  KvBlockTable() = default;
  explicit KvBlockTable(std::shared_ptr<KvPool> pool) : pool_(std::move(pool)) {}
  KvBlockTable(KvBlockTable&& o) noexcept : pool_(std::move(o.pool_)), ids_(std::exchange(o.ids_, {})) {}
  KvBlockTable& operator=(KvBlockTable&& o) noexcept {
    if (this != &o) {
      release();
      pool_ = std::move(o.pool_);
      ids_ = std::exchange(o.ids_, {});
    }
    return *this;
  }
  ~KvBlockTable() { release(); }

  KvPool* pool() const { return pool_.get(); }
  const std::vector<int32_t>& ids() const { return ids_; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  // Takes n more blocks (all or nothing); false when the pool has fewer free.
  bool grow(int64_t n) { return pool_ != nullptr && pool_->allocate(n, ids_); }
  void release() {
    if (pool_ != nullptr) pool_->release(ids_);
  }

 private:
  std::shared_ptr<KvPool> pool_;
  std::vector<int32_t> ids_;
};

// Per-layer K and V slabs of [rows][kv_dim] as views of one allocation (K then V per layer), so
// that memory that does not fit fails once, naming `what` (e.g. "KV cache for 4096 tokens"), the
// GiB asked for, the allocator's reason and `hint` (what to lower; left out when the reason
// already names a flag).
Status make_kv_slabs(int64_t n_layers, int64_t rows, int64_t kv_dim, DType dtype, Device device, std::string_view what,
                     std::string_view hint, std::vector<Tensor>& k, std::vector<Tensor>& v);

}  // namespace lithe
