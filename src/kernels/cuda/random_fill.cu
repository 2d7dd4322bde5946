// Uniform random fill of f32/f16/bf16 device arrays (synthetic benchmark weights). Each element's
// value is a hash of (seed, index) — splitmix64 — so results do not depend on the launch shape.
#include "common.cuh"

namespace lithe::cuda {
namespace {

__device__ __forceinline__ float uniform_pm1(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 random bits
}

template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, uint64_t seed, float center, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = center + scale * uniform_pm1(seed, static_cast<uint64_t>(i));
    if constexpr (std::is_same_v<T, float>) dst[i] = v;
    else if constexpr (std::is_same_v<T, __half>) dst[i] = __float2half_rn(v);
    else dst[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

Status fill_uniform(void* dst, WeightType t, int64_t n, uint64_t seed, float center, float scale, Stream s) {
  if (n < 0) return detail::bad_arg("fill_uniform: n = " + std::to_string(n) + " is negative");
  if (n == 0) return Status::ok();
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>(detail::ceil_div(n, threads), 65536));
  switch (t) {
    case WeightType::f32: fill_kernel<<<blocks, threads, 0, s>>>(static_cast<float*>(dst), n, seed, center, scale); break;
    case WeightType::f16: fill_kernel<<<blocks, threads, 0, s>>>(static_cast<__half*>(dst), n, seed, center, scale); break;
    case WeightType::bf16:
      fill_kernel<<<blocks, threads, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n, seed, center, scale);
      break;
  }
  return detail::launched("fill_uniform");
}

}  // namespace lithe::cuda
