// gemv_dequantize_f16's kernel: the GEMV layout expanded to a dense f16 matrix.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/gq_gemv_math.cuh"

namespace lithe::cuda::gemv_impl {

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk (16 rows' lane l).
template <int BITS>
__global__ void __launch_bounds__(256) dequant_kernel(const Mat mt, const Geo g, int64_t slots, __half* out) {
  using C = Codec<BITS>;
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
        const int64_t row = tile * kRows + L::row_of(lane, q);
        if (row >= mt.n_out) continue;
        const int col = c * C::kSpan + L::col_of(lane, q, 0);
        // s * (c - zero) is exact in f32: one rounding to f16.
        const __half lo = __float2half_rn(s * w.x), hi = __float2half_rn(s * w.y);
        __half* orow = out + row * g.n_in;
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

template <int BITS>
Status launch_dequant(const Mat& mt, const Geo& g, int64_t slots, void* out, Stream s) {
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(detail::ceil_div(slots, 256), 8192))), block(256);
  dequant_kernel<BITS><<<grid, block, 0, s>>>(mt, g, slots, static_cast<__half*>(out));
  return detail::launched("gq dequant_kernel");
}

}  // namespace lithe::cuda::gemv_impl
