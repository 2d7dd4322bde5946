// Shared by attention_prefill.cu and attention_decode.cu: inline-PTX wrappers for f16 tensor-core
// tiles (ldmatrix, mma.sync m16n8k16, valid on sm_80 and sm_90a), a fast exp2, and the host-side
// checks of AttentionParams both launchers make. The cp.async wrappers are in common.cuh.
//
// Softmax convention of both kernels: scores are kept in the log2 domain (q is pre-multiplied by
// scale * log2(e)), so exp(x*scale - m) becomes ex2(x' - m'). A running max of -inf means "nothing
// seen yet"; ex2(-inf) = 0 takes care of the first rescale.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/cuda/common.cuh"

namespace lithe::cuda::detail {

constexpr float kLog2e = 1.4426950408889634f;

// Four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix (l >> 3) and receives
// in r[i] its fragment of matrix i (row l/4, elements 2*(l%4), 2*(l%4)+1; transposed for _trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p))
               : "memory");
}

// d += a (16x16 f16, row-major fragment) * b (16x8 f16, column fragment), f32 accumulate.
// Fragments (g = lane/4, c = lane%4): a[0] (g, 2c..2c+1), a[1] (g+8, 2c..), a[2] (g, 2c+8..),
// a[3] (g+8, 2c+8..); b[0] (k 2c..2c+1, n g), b[1] (k 2c+8.., n g); d[0..1] (g, 2c..2c+1),
// d[2..3] (g+8, 2c..2c+1).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (MUFU, ~2 ulp); ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as one f16x2 register, `lo` in the low half (the lower column of a fragment pair).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Checks shared by both launchers (names the offending value). The kernels read q and the cache
// with 16-byte vector loads, so rows must start on 16-byte boundaries.
inline Status check_attention_params(const AttentionParams& p, const char* who) {
  const std::string w(who);
  if (p.head_dim != 64 && p.head_dim != 128)
    return bad_arg(w + ": head_dim " + std::to_string(p.head_dim) + " is not supported (64, 128)");
  if (p.n_kv_heads <= 0 || p.n_heads <= 0 || p.n_heads % p.n_kv_heads != 0)
    return bad_arg(w + ": n_heads " + std::to_string(p.n_heads) + " must be a positive multiple of n_kv_heads " +
                   std::to_string(p.n_kv_heads));
  if (p.n_q < 0) return bad_arg(w + ": n_q " + std::to_string(p.n_q) + " is negative");
  if (p.kv_capacity < 0 || p.kv_capacity > (int64_t{1} << 30))
    return bad_arg(w + ": kv_capacity " + std::to_string(p.kv_capacity) + " is out of range [0, 2^30]");
  if (p.kv_stride < p.n_kv_heads * p.head_dim)
    return bad_arg(w + ": kv_stride " + std::to_string(p.kv_stride) +
                   " is smaller than n_kv_heads * head_dim = " + std::to_string(p.n_kv_heads * p.head_dim));
  const int64_t per16 = p.kv == KvType::f16 ? 8 : 4;  // elements per 16 bytes
  if (p.kv_stride % per16 != 0)
    return bad_arg(w + ": kv_stride " + std::to_string(p.kv_stride) + " must be a multiple of " +
                   std::to_string(per16) + " (16-byte rows)");
  if (p.q == nullptr || p.q_pos == nullptr || p.out == nullptr) return bad_arg(w + ": null q, q_pos or out");
  if (p.kv_capacity > 0 && (p.k == nullptr || p.v == nullptr || p.kv_pos == nullptr))
    return bad_arg(w + ": null k, v or kv_pos with kv_capacity " + std::to_string(p.kv_capacity));
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.out))
    return bad_arg(w + ": q, k, v and out must be 16-byte aligned");
  if (!std::isfinite(p.scale)) return bad_arg(w + ": scale " + std::to_string(p.scale) + " is not finite");
  return Status::ok();
}

}  // namespace lithe::cuda::detail
