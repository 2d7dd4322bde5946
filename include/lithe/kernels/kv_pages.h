// Where a KV cache slot lives. Attention kernels walk a cache's slots s = 0, 1, ... (the order of
// its positions array); the K/V of slot s sit at row row(s) of the layer's slabs ([rows][kv_dim]).
//   contiguous cache (blocks == nullptr): row(s) = s
//   paged cache (KvPool): row(s) = blocks[s / block_size] * block_size + s % block_size, where
//                         blocks is the cache's block table (ids of fixed-size blocks of rows)
// Positions stay indexed by slot. Host and device code share this struct: `blocks` is a host
// array for the CPU kernels and a device array for the CUDA ones. Slots are below 2^31.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define LITHE_HOST_DEVICE __host__ __device__
#else
#define LITHE_HOST_DEVICE
#endif

namespace lithe {

struct KvPages {
  const int32_t* blocks = nullptr;
  int32_t block_size = 1;

  LITHE_HOST_DEVICE int64_t row(int64_t s) const {
    if (blocks == nullptr) return s;
    const auto s32 = static_cast<int32_t>(s);
    return static_cast<int64_t>(blocks[s32 / block_size]) * block_size + s32 % block_size;
  }
};

}  // namespace lithe
