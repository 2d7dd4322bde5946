// Per-sequence KV cache: for each layer, K and V slabs of [capacity][kv_dim] in f32 or f16
// (kv_dim = n_kv_heads * head_dim), plus the position held by each slot (shared by all layers).
// Attention reads positions from here, never from slot indices.
//
// A full cache (create) keeps every token: slots fill from 0, positions are the stream's, keys are
// stored after RoPE, and append fails at capacity.
//
// A rolling cache (create_rolling; StreamingLLM) keeps the first `sinks` tokens of the stream (the
// attention sinks; 0 for a plain sliding window) and the most recent `window`, forever:
//   slots [0, S)        the sinks, in stream order
//   slots [S, S + W)    a ring of the most recent tokens; the oldest sits at ring index head
//   positions           re-indexed after every append and rewind, as if the kept tokens were the
//                       whole sequence: sink i -> i, the ring's o-th oldest -> held sinks + o; a ring
//                       slot holding no token -> kNoPosition (after every query, so never attended)
//   keys                stored BEFORE RoPE (keys_pre_rope()): attention rotates each cached key by
//                       its slot's current position, and the query by its own (the newest token's
//                       position = held() - 1), so the rotations stay those of a from-scratch run
//                       over the kept tokens.
// Making room evicts the oldest ring token: O(1) per token, plus O(S + W) position writes per append.
//
// Storage. A contiguous cache owns its slabs ([capacity][kv_dim] per layer): slot s is row s. A
// paged cache (create_paged; the server) stores its K/V in a shared KvPool: k(layer) / v(layer)
// are the pool's slabs, slot s is row pages().row(s) (kernels/kv_pages.h), and the cache holds
// blocks for only the slots it has used so far: append() takes the blocks its slots need (and
// fails, naming the pool's free blocks, when there are too few), a scheduler may reserve() them
// ahead, and clear() and the destructor give them back. Either kind is full or rolling; positions
// are per slot and per cache in both.
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include "lithe/core/tensor.h"
#include "lithe/kernels/kv_pages.h"
#include "lithe/runtime/kv_pool.h"

namespace lithe {

class KvCache {
 public:
  static constexpr int32_t kNoPosition = std::numeric_limits<int32_t>::max();

  // Allocates capacity slots for n_layers on `device`. Errors name the bytes asked for.
  static Result<KvCache> create(int64_t n_layers, int64_t capacity, int64_t kv_dim, DType dtype,
                                Device device = Device::cpu);
  // A rolling cache of sinks + window slots (sinks >= 0, window >= 1).
  static Result<KvCache> create_rolling(int64_t n_layers, int64_t sinks, int64_t window, int64_t kv_dim, DType dtype,
                                        Device device = Device::cpu);
  // A paged cache in `pool` of `capacity` slots (full), or of sinks + window slots (rolling, when
  // window > 0). It holds no block until reserve().
  static Result<KvCache> create_paged(std::shared_ptr<KvPool> pool, int64_t capacity);
  static Result<KvCache> create_paged_rolling(std::shared_ptr<KvPool> pool, int64_t sinks, int64_t window);

  // Unique per created cache (kept by moves): tells one cache's buffers from another's even when
  // a new cache object reuses a freed one's address.
  uint64_t id() const { return id_; }
  int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  // Slots attention scans: [0, size()). A rolling cache may have unheld slots in there (kNoPosition).
  int64_t size() const { return size_; }
  size_t bytes() const;  // of K/V it holds (a paged cache: its blocks')

  bool rolling() const { return rolling_; }
  // Keys are cached before RoPE and rotated at attention time by positions() (rolling caches).
  bool keys_pre_rope() const { return rolling_; }
  int64_t sinks() const { return sinks_; }
  int64_t window() const { return window_; }
  // Tokens appended since the last clear (a full cache: size()); held(): tokens attention sees.
  int64_t seen() const { return rolling_ ? seen_ : size_; }
  int64_t held() const { return rolling_ ? n_sink_ + n_win_ : size_; }
  // Tokens one append may take: all free slots of a full cache, the window of a rolling one.
  int64_t max_append() const { return rolling_ ? window_ : capacity_ - size_; }

  // Reserves slots for the next m tokens; returns their slot indices. The caller writes K/V of
  // every layer for them. A full cache records positions pos[0..m) and fails when full (naming the
  // capacity); a rolling cache evicts what it must, ignores `pos` (may be null) and re-indexes:
  // the new tokens' positions are positions()[slot]. It fails when m > window().
  Result<std::vector<int64_t>> append(const int32_t* pos, int64_t m);
  // A paged cache gives its blocks back too.
  void clear();
  // Keeps the first n tokens of the stream (n >= seen(): unchanged), e.g. to re-run a suffix;
  // returns seen() afterwards. A rolling cache that has evicted some of tokens [n, seen()) cannot
  // go back there and clears itself (returns 0): the caller re-runs the stream from the start.
  int64_t rewind(int64_t n);

  // Paged caches: slots append(m) may write (it backs [0, slots_after(m)) first), blocks that
  // takes beyond those held, and reserve(): backs slots [0, n) with blocks from the pool (n is
  // clamped to the capacity); false, and nothing taken, when the pool has too few free.
  // Contiguous caches back every slot: reserve() is true, blocks_to_append() 0.
  int64_t slots_after(int64_t m) const;
  int64_t blocks_to_append(int64_t m) const;
  bool reserve(int64_t n);
  bool paged() const { return blocks_.pool() != nullptr; }
  // Slot -> row of k(layer) / v(layer); the block table is host memory (blocks().size() entries).
  KvPages pages() const;
  const std::vector<int32_t>& blocks() const { return blocks_.ids(); }
  // Entries a block table of this cache can reach: ceil(capacity / block size) (0: contiguous).
  int64_t max_blocks() const;

  // Per layer, [rows][kv_dim]: the cache's own slabs, or the pool's.
  Tensor& k(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  Tensor& v(int64_t layer) { return v_[static_cast<size_t>(layer)]; }
  const int32_t* positions() const { return pos_.data(); }
  // On a device cache, the positions mirrored in device memory ([capacity] i32; the backend writes
  // the new slots' positions there when it stores their K/V). Undefined on a host cache.
  Tensor& device_positions() { return pos_dev_; }

 private:
  void reindex();  // rolling: positions and size_ from the sink count and the ring
  static Result<KvCache> make(int64_t capacity, int64_t kv_dim, DType dtype, Device device);  // all but the slabs

  std::vector<Tensor> k_, v_;  // per layer: [capacity, kv_dim]
  std::vector<int32_t> pos_;   // [capacity]
  Tensor pos_dev_;             // [capacity] on the device, for device caches
  int64_t capacity_ = 0, kv_dim_ = 0, size_ = 0;
  uint64_t id_ = 0;
  DType dtype_ = DType::f32;
  // Rolling caches: sinks held, ring head / tokens held / slots ever used since the ring was empty.
  bool rolling_ = false;
  int64_t sinks_ = 0, window_ = 0, seen_ = 0;
  int64_t n_sink_ = 0, head_ = 0, n_win_ = 0, ring_used_ = 0;
  // Paged caches: the block table (block i backs slots [i * bs, (i + 1) * bs)) and its pool.
  KvBlockTable blocks_;
};

}  // namespace lithe
