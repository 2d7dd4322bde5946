// Top-k of logit rows for sampling (launcher declared in cuda_ops.h), one block per row.
//
// Every element has a unique 64-bit key: the order-preserving image of its value in the high 32
// bits (-0 and +0 mapped together, so they tie as floats do) and the bitwise-inverted id in the
// low 32 bits. Larger key = larger value, then smaller id: exactly the sampler's order, and no two
// keys are equal, so "the k largest keys" is always exactly k elements.
//
// Pass 1 over the row: each thread keeps its largest element (a float compare per element; a
//   thread visits ids in increasing order, so keeping the first of equal values keeps the smaller
//   id). k = 1 (argmax) ends here with a block max of the threads' keys.
// Bound: L = the k-th largest of the threads' maxima (a radix select over blockDim keys in shared
//   memory, then a block min over the maxima at or above its threshold). At least k maxima are
//   >= L and they are distinct elements (or L = 0, the key of a thread without elements, and all
//   elements pass), so at least k elements are >= L; for real logits only a few more than k are.
// Pass 2: the keys >= L are gathered into shared memory (up to kCap). Up to kSortMax of them are
//   sorted outright (bitonic, descending); otherwise a radix select in shared memory (8-bit digits
//   from the top, stopping once a digit's bucket holds exactly the keys still needed) finds the
//   k-th largest key and only the k keys >= it are sorted.
// If more than kCap keys are >= L (only with contrived layouts), the radix select runs over the
// row in global memory instead (one pass per digit): slower, same result.
// Output values are re-read from the row (so -0.0 stays -0.0).
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"

namespace lithe::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxThreads = 1024;
constexpr int kSortMax = 1024;  // candidates sorted outright (a power of two)
constexpr int kCap = 3072;      // candidates kept in shared memory
constexpr int kUnroll = 4;      // loads in flight per thread

__device__ __forceinline__ uint64_t make_key(float v, uint32_t id) {
  uint32_t b = __float_as_uint(v);
  if ((b & 0x7fffffffu) == 0) b = 0;  // -0 == +0
  const uint32_t u = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<uint64_t>(u) << 32) | static_cast<uint32_t>(~id);
}
__device__ __forceinline__ uint32_t key_id(uint64_t key) { return ~static_cast<uint32_t>(key); }
__device__ __forceinline__ float key_value(uint64_t key) {
  const auto u = static_cast<uint32_t>(key >> 32);
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

// A row in global memory. for_each(f) calls f(value, id, valid) for this thread's elements in
// increasing id order; every lane of a warp makes the same calls (valid = false past the end), so
// f may use warp collectives. vec: float4 loads (row 16-byte aligned, vocab % 4 == 0).
struct Row {
  const float* __restrict__ p;
  uint32_t vocab;
  bool vec;

  template <typename F>
  __device__ __forceinline__ void for_each(F&& f) const {
    if (vec) {
      const uint32_t units = vocab / 4;
      const float4* p4 = reinterpret_cast<const float4*>(p);
      for (uint32_t base = 0; base < units; base += kUnroll * blockDim.x) {
        float4 v[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const uint32_t u = base + j * blockDim.x + threadIdx.x;
          v[j] = u < units ? p4[u] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const uint32_t u = base + j * blockDim.x + threadIdx.x;
          const bool valid = u < units;
          f(v[j].x, 4 * u, valid);
          f(v[j].y, 4 * u + 1, valid);
          f(v[j].z, 4 * u + 2, valid);
          f(v[j].w, 4 * u + 3, valid);
        }
      }
    } else {
      for (uint32_t base = 0; base < vocab; base += kUnroll * blockDim.x) {
        float v[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const uint32_t u = base + j * blockDim.x + threadIdx.x;
          v[j] = u < vocab ? p[u] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
          const uint32_t u = base + j * blockDim.x + threadIdx.x;
          f(v[j], u, u < vocab);
        }
      }
    }
  }
  // f(key, valid), same order and calls.
  template <typename F>
  __device__ __forceinline__ void for_each_key(F&& f) const {
    for_each([&](float v, uint32_t id, bool valid) { f(make_key(v, id), valid); });
  }
  // The first id this thread visits, or vocab when it has none.
  __device__ __forceinline__ uint32_t first_id() const {
    const uint32_t id = vec ? 4 * threadIdx.x : threadIdx.x;
    return id < vocab ? id : vocab;
  }
};

// Keys in shared memory, f(key, valid) with the same calling convention.
struct SharedKeys {
  const uint64_t* keys;
  uint32_t n;

  template <typename F>
  __device__ __forceinline__ void for_each_key(F&& f) const {
    for (uint32_t base = 0; base < n; base += blockDim.x) {
      const uint32_t i = base + threadIdx.x;
      f(i < n ? keys[i] : 0, i < n);
    }
  }
};

// This thread's largest key in the row, 0 (below every real key) when it has no element.
__device__ __forceinline__ uint64_t thread_max_key(const Row& row) {
  float best = -INFINITY;
  uint32_t best_id = UINT32_MAX;
  row.for_each([&](float v, uint32_t id, bool valid) {
    if (valid && v > best) {  // strict: the first (smallest id) of equal values stays
      best = v;
      best_id = id;
    }
  });
  const uint32_t first = row.first_id();
  if (first == row.vocab) return 0;
  return best_id == UINT32_MAX ? make_key(-INFINITY, first) : make_key(best, best_id);  // all -inf: the first
}

__device__ __forceinline__ uint64_t warp_max_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = max(v, static_cast<uint64_t>(__shfl_xor_sync(kFull, static_cast<unsigned long long>(v), o)));
  return v;
}
__device__ __forceinline__ uint64_t warp_min_u64(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = min(v, static_cast<uint64_t>(__shfl_xor_sync(kFull, static_cast<unsigned long long>(v), o)));
  return v;
}
// Minimum over the block, returned to every thread (red: 32 entries of shared memory). Barriers
// inside and last.
__device__ __forceinline__ uint64_t block_min_u64(uint64_t v, uint64_t* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_min_u64(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = warp_min_u64(lane < static_cast<int>(blockDim.x >> 5) ? red[lane] : UINT64_MAX);
  __syncthreads();
  return v;
}

struct Smem {
  union {
    uint64_t maxima[kMaxThreads];  // the threads' maxima, until L is known
    uint64_t top[kTopKMax];        // the final k keys (selected paths)
  } a;
  uint64_t cand[kCap];
  uint32_t hist[256];
  uint64_t red[32];
  uint32_t warp_suffix[32];
  uint32_t bin, rem, bin_count, n_cand, n_top;
};

// All threads: the bin holding the rem-th largest key counted in hist[0, 256) (the largest bin d
// with sum(hist[d..256)) >= rem, which exists), stored with the rank of that key inside the bin
// (new rem) and the bin's count. Thread t < 256 owns bin t. Ends with a barrier.
__device__ __forceinline__ void select_bin(uint32_t rem, Smem& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t c = threadIdx.x < 256 ? sh.hist[threadIdx.x] : 0;
  uint32_t suffix = c;  // over this warp's lanes >= lane
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t t = __shfl_down_sync(kFull, suffix, o);
    if (lane + o < 32) suffix += t;
  }
  if (warp < 8 && lane == 0) sh.warp_suffix[warp] = suffix;  // warp total
  __syncthreads();
  if (warp == 0) {
    const uint32_t total = lane < 8 ? sh.warp_suffix[lane] : 0;
    uint32_t s = total;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      const uint32_t t = __shfl_down_sync(kFull, s, o);
      if (lane + o < 8) s += t;
    }
    __syncwarp();
    if (lane < 8) sh.warp_suffix[lane] = s - total;  // keys in the bins of higher warps
  }
  __syncthreads();
  if (threadIdx.x < 256) {
    suffix += sh.warp_suffix[warp];  // keys in bins >= threadIdx.x
    const uint32_t above = suffix - c;
    if (above < rem && rem <= suffix) {  // exactly one thread
      sh.bin = threadIdx.x;
      sh.rem = rem - above;
      sh.bin_count = c;
    }
  }
  __syncthreads();
}

// Radix select, 8-bit digits from the top: t <= the k-th largest key of src (k <= its size) with
// at least k keys >= t, and exactly k when the keys are unique (it stops at the first digit
// prefix with exactly k keys at or above it). Keys matching `prefix` on the bits of `mask` are in
// play; rem is the rank among them.
template <typename Src>
__device__ __forceinline__ uint64_t radix_select(const Src& src, uint32_t k, Smem& sh) {
  uint64_t prefix = 0, mask = 0;
  uint32_t rem = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    __syncthreads();
    src.for_each_key([&](uint64_t key, bool valid) {
      if (valid && ((key ^ prefix) & mask) == 0) atomicAdd(&sh.hist[static_cast<uint32_t>(key >> shift) & 0xffu], 1u);
    });
    __syncthreads();
    select_bin(rem, sh);
    prefix |= static_cast<uint64_t>(sh.bin) << shift;
    mask |= uint64_t{0xff} << shift;
    rem = sh.rem;
    // Once the bucket holds exactly the keys still needed, the keys >= prefix are exactly k
    // (those with larger high digits, plus the whole bucket).
    if (sh.bin_count == rem) break;  // the same for the whole block
  }
  __syncthreads();  // sh.bin/rem/bin_count read before anyone writes them again
  return prefix;
}

// Appends the keys of src that are >= threshold to dst (counter *n; at most cap are stored).
template <typename Src>
__device__ __forceinline__ void gather(const Src& src, uint64_t threshold, uint64_t* dst, uint32_t* n, uint32_t cap) {
  src.for_each_key([&](uint64_t key, bool valid) {
    if (valid && key >= threshold) {
      const uint32_t slot = atomicAdd(n, 1u);
      if (slot < cap) dst[slot] = key;
    }
  });
}

// Bitonic sort of keys[0, n) descending, padded to a power of two with 0 (n2 entries must fit).
// Barrier first and last.
__device__ __forceinline__ void sort_desc(uint64_t* keys, int n) {
  int n2 = 1;
  while (n2 < n) n2 <<= 1;
  __syncthreads();
  for (int i = n + threadIdx.x; i < n2; i += blockDim.x) keys[i] = 0;
  __syncthreads();
  for (int size = 2; size <= n2; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < n2 / 2; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1)), j = i + stride;
        const bool desc = (i & size) == 0;
        const uint64_t a = keys[i], b = keys[j];
        if (desc ? a < b : a > b) {
          keys[i] = b;
          keys[j] = a;
        }
      }
      __syncthreads();
    }
  }
}

__global__ void __launch_bounds__(kMaxThreads, 1) topk_kernel(const float* __restrict__ logits, uint32_t vocab, int k,
                                                              bool vec, float* __restrict__ vals,
                                                              int32_t* __restrict__ ids, int32_t* __restrict__ best) {
  __shared__ Smem sh;
  const Row row{logits + int64_t(blockIdx.x) * vocab, vocab, vec};

  // Pass 1 and the bound L: the smallest of the maxima >= the select's threshold.
  const uint64_t my_max = thread_max_key(row);
  sh.a.maxima[threadIdx.x] = my_max;
  if (threadIdx.x == 0) sh.n_cand = sh.n_top = 0;
  __syncthreads();
  const uint64_t t = radix_select(SharedKeys{sh.a.maxima, blockDim.x}, static_cast<uint32_t>(k), sh);
  const uint64_t bound = block_min_u64(my_max >= t ? my_max : UINT64_MAX, sh.red);

  // Pass 2: keys >= L into cand. A float compare first: lo is the smallest float whose key can
  // reach L (L's value bits decoded; -inf where they decode to no float, e.g. L = 0 when fewer
  // than k threads hold elements), then the exact key compare.
  const auto lu = static_cast<uint32_t>(bound >> 32);
  const float lo = lu < 0x007fffffu ? -INFINITY : key_value(bound);
  row.for_each([&](float v, uint32_t id, bool valid) {
    if (valid && v >= lo) {
      const uint64_t key = make_key(v, id);
      if (key >= bound) {
        const uint32_t slot = atomicAdd(&sh.n_cand, 1u);
        if (slot < kCap) sh.cand[slot] = key;
      }
    }
  });
  __syncthreads();
  const uint32_t n_cand = sh.n_cand;

  const uint64_t* out = sh.a.top;
  if (n_cand <= kSortMax) {  // sort all candidates
    sort_desc(sh.cand, static_cast<int>(n_cand));
    out = sh.cand;
  } else {
    if (n_cand <= kCap) {
      const SharedKeys cand{sh.cand, n_cand};
      gather(cand, radix_select(cand, static_cast<uint32_t>(k), sh), sh.a.top, &sh.n_top, kTopKMax);
    } else {  // too many: select over the row
      gather(row, radix_select(row, static_cast<uint32_t>(k), sh), sh.a.top, &sh.n_top, kTopKMax);
    }
    sort_desc(sh.a.top, k);
  }

  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    const uint32_t id = key_id(out[i]);
    ids[int64_t(blockIdx.x) * k + i] = static_cast<int32_t>(id);
    vals[int64_t(blockIdx.x) * k + i] = row.p[id];
    if (i == 0 && best != nullptr) best[blockIdx.x] = static_cast<int32_t>(id);
  }
}

__global__ void __launch_bounds__(kMaxThreads) argmax_kernel(const float* __restrict__ logits, uint32_t vocab, bool vec,
                                                             float* __restrict__ vals, int32_t* __restrict__ ids,
                                                             int32_t* __restrict__ best_ids) {
  __shared__ uint64_t partial[32];
  const Row row{logits + int64_t(blockIdx.x) * vocab, vocab, vec};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  uint64_t best = warp_max_u64(thread_max_key(row));
  if (lane == 0) partial[warp] = best;
  __syncthreads();
  if (warp == 0) {
    best = warp_max_u64(lane < n_warps ? partial[lane] : 0);
    if (lane == 0) {
      const uint32_t id = key_id(best);
      ids[blockIdx.x] = static_cast<int32_t>(id);
      vals[blockIdx.x] = row.p[id];
      if (best_ids != nullptr) best_ids[blockIdx.x] = static_cast<int32_t>(id);
    }
  }
}

Status bad(const std::string& what) { return detail::bad_arg("top_k: " + what); }

}  // namespace

Status top_k(const float* logits, int64_t rows, int64_t vocab, int k, float* vals, int32_t* ids, Stream s,
             int32_t* best) {
  if (k < 1 || k > kTopKMax)
    return bad("k must be in [1, " + std::to_string(kTopKMax) + "], got " + std::to_string(k));
  if (vocab < 1 || vocab > INT32_MAX)
    return bad("vocab must be in [1, " + std::to_string(INT32_MAX) + "], got " + std::to_string(vocab));
  if (k > vocab) return bad("k " + std::to_string(k) + " exceeds vocab " + std::to_string(vocab));
  if (rows < 0 || rows > INT32_MAX)
    return bad("rows must be in [0, " + std::to_string(INT32_MAX) + "], got " + std::to_string(rows));
  if (rows == 0) return Status::ok();
  if (logits == nullptr || vals == nullptr || ids == nullptr) return bad("logits, vals and ids must not be null");
  const bool vec = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  // 256 threads (>= kTopKMax, which the bound needs) for small rows, kMaxThreads from 4096 up.
  const unsigned threads = vocab >= 4096 ? kMaxThreads : 256;
  const auto v = static_cast<uint32_t>(vocab);
  if (k == 1) {
    argmax_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(logits, v, vec, vals, ids, best);
    return detail::launched("argmax_kernel");
  }
  topk_kernel<<<static_cast<unsigned>(rows), threads, 0, s>>>(logits, v, k, vec, vals, ids, best);
  return detail::launched("topk_kernel");
}

}  // namespace lithe::cuda
