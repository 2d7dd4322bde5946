// Rotary-embedding pieces shared by rope_kernel (elementwise.cu), the fused rope + KV-store kernel
// (rope_kv.cu) and the rope_kv epilogues of the projection kernels (matvec.cu, gq_gemv.cu), so that
// all rotate bit-identically (and as the CPU kernel does): the cos / sin table of one token (angles
// in double), the two elements pair i turns, the rotation, and the epilogue's pairs and stores.
#pragma once

#include <cstdint>
#include <string>

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

__device__ __forceinline__ void store_kv(void* cache, KvType kv, int64_t i, float v) {
  if (kv == KvType::f16)
    static_cast<__half*>(cache)[i] = __float2half_rn(v);
  else
    static_cast<float*>(cache)[i] = v;
}

// ---- the rope_kv epilogue of the projection kernels (matvec.cu, gq_gemv.cu) ----
// Matrix j (0 q, 1 k, 2 v) is cut into pairs of rows, each starting at an even row f: for q and k
// the two elements rotary pair k of a head turns (rope_pair; past rot_dim two neighbours,
// unrotated: k = -1), for v two neighbours. Every row is in one pair, within its head.
struct RopeRows {
  int k;
  int64_t ra, rb;
};
__device__ __forceinline__ RopeRows rope_rows(const MatvecRope& r, int j, int64_t f) {
  RopeRows p{-1, f, f + 1};
  if (j == 2) return p;
  const int hd = static_cast<int>(r.head_dim), half = static_cast<int>(r.rot_dim / 2);
  const int64_t base = f - f % hd;
  const int k = static_cast<int>(f % hd) / 2;  // pair k of the head
  if (k < half) {
    const int2 e = rope_pair(k, half, r.mode == RopeMode::interleaved);
    p.k = k;
    p.ra = base + e.x;
    p.rb = base + e.y;
  }
  return p;
}

// Pair p of matrix j for x row i, whose product rows are va, vb: rotated (the angle as rope_table
// computes it), written to y [m][n], and for k and v to the cache row of the row's slot (k: the
// slot's position too).
__device__ __forceinline__ void rope_kv_pair_out(const MatvecRope& r, int j, const RopeRows& p, int i, float* y,
                                                 int64_t n, float va, float vb) {
  const int32_t pos = r.pos[i];
  if (p.k >= 0) {
    double sn, cs;
    sincos(static_cast<double>(pos) * static_cast<double>(r.inv_freq[p.k]), &sn, &cs);
    const float2 o = rope_rotate(va, vb, static_cast<float>(cs), static_cast<float>(sn));
    va = o.x;
    vb = o.y;
  }
  y[i * n + p.ra] = va;
  y[i * n + p.rb] = vb;
  if (j == 0) return;
  const int64_t slot = r.slots[i], row = r.pages.row(slot);
  void* cache = j == 1 ? r.k_cache : r.v_cache;
  store_kv(cache, r.kv, row * n + p.ra, va);
  store_kv(cache, r.kv, row * n + p.rb, vb);
  if (j == 1 && p.ra == 0 && r.kv_pos != nullptr) r.kv_pos[slot] = pos;
}

// Checks the rope_kv epilogue's arguments for q, k, v of nq, nk, nv rows (f: the caller's name).
Status check_rope(const std::string& f, int64_t nq, int64_t nk, int64_t nv, const MatvecRope* r);

}  // namespace lithe::cuda::detail
