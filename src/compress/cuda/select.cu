// SparseGPT's adaptive mask of one lazy block on the GPU (kernels.h): every weight of the
// [n_out x bk] block gets the 64-bit key (score bits << 32 | position); scores are non-negative
// floats, whose bits order as integers, so one radix sort of the keys orders by (score, position)
// exactly as sparsegpt.cpp's k_smallest does, and the first k keys name the pruned weights.
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include <string>

#include "kernels.h"

namespace lithe::compress::cuda {
namespace {

constexpr int kThreads = 256;

size_t align256(size_t b) { return (b + 255) & ~size_t{255}; }

__global__ void score_keys_kernel(const float* wk, const float* u, int64_t n_out, int64_t n, int64_t i1, int64_t bk,
                                  unsigned long long* keys) {
  const int64_t count = n_out * bk;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / bk, c = i % bk;
    const float x = wk[r * n + i1 + c], d = u[(i1 + c) * n + i1 + c];
    const float score = __fdiv_rn(__fmul_rn(x, x), __fmul_rn(d, d));
    keys[i] = (static_cast<unsigned long long>(__float_as_uint(score)) << 32) | static_cast<unsigned long long>(i);
  }
}

__global__ void mark_pruned_kernel(const unsigned long long* sorted, int64_t k, int64_t n, int64_t i1, int64_t bk,
                                   uint8_t* mask) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < k;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto pos = static_cast<int64_t>(sorted[t] & 0xffffffffull);
    mask[(pos / bk) * n + i1 + pos % bk] = 0;
  }
}

unsigned blocks_for(int64_t count) {
  const int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

size_t sort_temp_bytes(int64_t count) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<const unsigned long long*>(nullptr),
                                 static_cast<unsigned long long*>(nullptr), static_cast<int>(count));
  return bytes;
}

}  // namespace

size_t prune_block_scratch_bytes(int64_t n_out, int64_t bk) {
  const int64_t count = n_out * bk;
  return 2 * align256(static_cast<size_t>(count) * 8) + align256(sort_temp_bytes(count));
}

Status prune_block(const float* wk, const float* u, int64_t n_out, int64_t n, int64_t i1, int64_t bk, int64_t k,
                   uint8_t* mask, void* scratch, size_t scratch_bytes, Stream s) {
  const int64_t count = n_out * bk;
  if (n_out <= 0 || bk <= 0 || count > 0x7fffffffLL || k < 0 || k > count)
    return Status(StatusCode::invalid_argument, "prune_block: " + std::to_string(k) + " of [" + std::to_string(n_out) +
                                                    " x " + std::to_string(bk) + "]");
  if (k == 0) return Status::ok();
  if (scratch_bytes < prune_block_scratch_bytes(n_out, bk))
    return Status(StatusCode::internal, "prune_block: scratch of " + std::to_string(scratch_bytes) + " bytes is too small");
  auto* keys = static_cast<unsigned long long*>(scratch);
  auto* sorted = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) + align256(count * 8));
  void* temp = static_cast<char*>(scratch) + 2 * align256(count * 8);
  size_t temp_bytes = sort_temp_bytes(count);
  score_keys_kernel<<<blocks_for(count), kThreads, 0, s>>>(wk, u, n_out, n, i1, bk, keys);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("score_keys launch failed: ") + cudaGetErrorString(e));
  e = cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys, sorted, static_cast<int>(count), 0, 64, s);
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("radix sort failed: ") + cudaGetErrorString(e));
  mark_pruned_kernel<<<blocks_for(k), kThreads, 0, s>>>(sorted, k, n, i1, bk, mask);
  e = cudaGetLastError();
  if (e != cudaSuccess) return Status(StatusCode::internal, std::string("mark_pruned launch failed: ") + cudaGetErrorString(e));
  return Status::ok();
}

}  // namespace lithe::compress::cuda
