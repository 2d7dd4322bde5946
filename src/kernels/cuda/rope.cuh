// Rotary-embedding pieces shared by rope_kernel (elementwise.cu) and the fused rope + KV-store
// kernel (rope_kv.cu), so that both rotate bit-identically (and as the CPU kernel does): the cos /
// sin table of one token (angles in double), the two elements pair i turns, and the rotation.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace lithe::cuda::detail {

constexpr int kRopeMaxHalf = 512;  // rot_dim <= 1024, as the CPU kernel

// cs[i], sn[i] = cos, sin(pos * inv_freq[i]) for i < half, by the block's threads (the caller
// synchronises before reading them).
__device__ __forceinline__ void rope_table(int32_t pos, const float* __restrict__ inv_freq, int half, float* cs,
                                           float* sn) {
  const double p = static_cast<double>(pos);
  for (int i = static_cast<int>(threadIdx.x); i < half; i += static_cast<int>(blockDim.x)) {
    double s, c;
    sincos(p * static_cast<double>(inv_freq[i]), &s, &c);
    cs[i] = static_cast<float>(c);
    sn[i] = static_cast<float>(s);
  }
}

// The elements of a head that pair i (< half) rotates: interleaved (2i, 2i+1), half (i, i + half).
__device__ __forceinline__ int2 rope_pair(int i, int half, bool interleaved) {
  return interleaved ? make_int2(2 * i, 2 * i + 1) : make_int2(i, i + half);
}

// (a, b) turned by the angle whose cos and sin are c and s.
__device__ __forceinline__ float2 rope_rotate(float a, float b, float c, float s) {
  return make_float2(a * c - b * s, b * c + a * s);
}

}  // namespace lithe::cuda::detail
