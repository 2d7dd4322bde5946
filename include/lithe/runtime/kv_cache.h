// Contiguous per-sequence KV cache: for each layer, K and V slabs of [capacity][kv_dim] in f32 or
// f16 (kv_dim = n_kv_heads * head_dim), plus the position held by each slot (shared by all
// layers). Slots fill from 0; positions need not equal slot indices (attention-sink caches later
// re-index them), which is why attention reads positions from here.
#pragma once

#include <vector>

#include "lithe/core/tensor.h"

namespace lithe {

class KvCache {
 public:
  // Allocates capacity slots for n_layers on `device`. Errors name the bytes asked for.
  static Result<KvCache> create(int64_t n_layers, int64_t capacity, int64_t kv_dim, DType dtype,
                                Device device = Device::cpu);

  // Unique per created cache (kept by moves): tells one cache's buffers from another's even when
  // a new cache object reuses a freed one's address.
  uint64_t id() const { return id_; }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  int64_t size() const { return size_; }  // filled slots
  size_t bytes() const;

  // Reserves the next m slots for positions pos[0..m); returns their slot indices. The caller
  // writes K/V of every layer for them. Error when the cache is full (names capacity).
  Result<std::vector<int64_t>> append(const int32_t* pos, int64_t m);
  void clear() { size_ = 0; }
  // Drops slots from `n` on (e.g. to re-run a suffix).
  void truncate(int64_t n) { size_ = std::min(size_, std::max<int64_t>(0, n)); }

  Tensor& k(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  Tensor& v(int64_t layer) { return v_[static_cast<size_t>(layer)]; }
  const int32_t* positions() const { return pos_.data(); }
  // On a device cache, the positions mirrored in device memory ([capacity] i32; the backend writes
  // the new slots' positions there when it stores their K/V). Undefined on a host cache.
  Tensor& device_positions() { return pos_dev_; }

 private:
  std::vector<Tensor> k_, v_;  // per layer: [capacity, kv_dim]
  std::vector<int32_t> pos_;   // [capacity]
  Tensor pos_dev_;             // [capacity] on the device, for device caches
  int64_t capacity_ = 0, kv_dim_ = 0, size_ = 0;
  uint64_t id_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace lithe
