// gemv_dequantize_f16's kernel: the GEMV layout expanded to a dense f16 matrix.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/gq_gemv_math.cuh"

namespace lithe::cuda::gemv_impl {

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk (16 rows' lane l).
// SP (2:4): the lane's pair of code columns is the two kept values of a quad of 4 columns, whose
// meta nibble another lane holds (gq_gemv_layout.h); the thread writes the whole quad, zeros beside.
template <int BITS, bool SP>
__global__ void __launch_bounds__(256) dequant_kernel(const Mat mt, const Geo g, int64_t slots, __half* out) {
  using C = Codec<BITS, SP>;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < slots;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx / 32, tile = tc / g.chunks;
    const int c = static_cast<int>(tc % g.chunks), lane = static_cast<int>(idx % 32);
    Chunk ch;
    ch.lo = mt.codes[idx];
    if constexpr (C::kHi) ch.hi = mt.hi[idx];
#pragma unroll
    for (int k = 0; k < C::kUnits; ++k) {
      const int unit = c * C::kUnits + k;
      if (unit >= g.units) continue;
      const uint2 rec = mt.recs[(tile * g.groups + group_of(g, unit)) * 8 + lane / 4];
#pragma unroll
      for (int q = 8 * k; q < 8 * k + 8; ++q) {  // the unit's two k16 blocks
        const int reg = q % 4;
        const uint32_t rr = reg & 1 ? rec.y : rec.x;
        const float s = scale_of(rr);
        const float2 w = h2_to_f2(pair_values<BITS>(ch, q, class_addend<BITS>(rr, L::class_of_reg(BITS, reg))));
        const int rl = L::row_of(lane, q);
        const int64_t row = tile * kRows + rl;
        if (row >= mt.n_out) continue;
        const int cc = L::col_of(lane, q, 0);  // code column of the chunk (even)
        // s * (c - zero) is exact in f32: one rounding to f16.
        const __half lo = __float2half_rn(s * w.x), hi = __float2half_rn(s * w.y);
        __half* orow = out + row * g.n_in;
        if constexpr (SP) {
          const int kb = q / 4, quad = cc % 16 / 2;
          const uint2 mw = mt.hi[tc * 32 + L::meta_lane(rl, kb, quad)];
          const uint32_t nib = (L::meta_word(kb) ? mw.y : mw.x) >> L::meta_bit(rl, quad);
          const int col = 2 * (c * C::kSpan + cc);  // the quad's first column
          const uint32_t p0 = nib & 3u, p1 = nib >> 2 & 3u;
          const uint32_t lb = __half_as_ushort(lo), hb = __half_as_ushort(hi);
          uint32_t v[4];  // the quad's f16 bits, kept positions p0 (lo) and p1 (hi), zeros beside
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) v[e] = e == p0 ? lb : e == p1 ? hb : 0u;
          if (mt.perm == nullptr) {  // one 8-byte store (n_in % 64 == 0: aligned)
            *reinterpret_cast<uint2*>(orow + col) = make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) orow[mt.perm[col + e]] = __ushort_as_half(static_cast<unsigned short>(v[e]));
          }
        } else {
          const int col = c * C::kSpan + cc;
          if (mt.perm == nullptr) {
            *reinterpret_cast<__half2*>(orow + col) = __halves2half2(lo, hi);
          } else {
            orow[mt.perm[col]] = lo;
            orow[mt.perm[col + 1]] = hi;
          }
        }
      }
    }
  }
}

template <int BITS, bool SP>
Status launch_dequant(const Mat& mt, const Geo& g, int64_t slots, void* out, Stream s) {
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(slots, 256), 8192))), block(256);
  dequant_kernel<BITS, SP><<<grid, block, 0, s>>>(mt, g, slots, static_cast<__half*>(out));
  return detail::launched("gq dequant_kernel");
}

}  // namespace lithe::cuda::gemv_impl
