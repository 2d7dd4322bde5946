// gemv_dequantize_f16's kernel: the GEMV layout expanded to a dense f16 matrix.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/gq_gemv_math.cuh"

namespace lithe::cuda::gemv_impl {

// Dense f16 [n_out][n_in] (original column order): one thread per stored chunk (16 rows' lane l),
// a unit (two k16 blocks, 8 f16 pairs per lane) at a time. Stores of 8 bytes, 32 contiguous per
// row and quad of lanes (a whole sector; 4-byte stores took twice as long on an H100):
// - dense: lanes t and t ^ 1 swap one pair per row, so that even t holds columns 2t .. 2t + 3 and
//   odd t columns 2t + 6 .. 2t + 9 of the k16 block;
// - SP (2:4): the lane's pair of code columns is the two kept values of a quad of 4 columns, whose
//   meta nibble another lane holds (gq_gemv_layout.h); the thread writes the whole quad, zeros
//   beside.
// With act-order the values are scattered by perm one by one.
template <int BITS, bool SP>
__global__ void __launch_bounds__(256) dequant_kernel(const Mat mt, const Geo g, int64_t slots, __half* out) {
  using C = Codec<BITS, SP>;
  // Every lane of a warp runs the same (tile, chunk): slots and the block size are multiples of 32.
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < slots;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tc = idx / 32, tile = tc / g.chunks;
    const int c = static_cast<int>(tc % g.chunks), lane = static_cast<int>(idx % 32), tq = lane % 4;
    Chunk ch;
    ch.lo = mt.codes[idx];
    if constexpr (C::kHi) ch.hi = mt.hi[idx];
#pragma unroll
    for (int k = 0; k < C::kUnits; ++k) {
      const int unit = c * C::kUnits + k;
      if (unit >= g.units) continue;  // warp-uniform
      const uint2 rec = mt.recs[(tile * g.groups + group_of(g, unit)) * 8 + lane / 4];
      uint32_t pw[8];  // f16 pair of q = 8k + j
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = 8 * k + j, reg = q % 4;
        const uint32_t rr = reg & 1 ? rec.y : rec.x;
        const float s = scale_of(rr);
        const float2 w = h2_to_f2(pair_values<BITS>(ch, q, class_addend<BITS>(rr, L::class_of_reg(BITS, reg))));
        // s * (c - zero) is exact in f32: one rounding to f16.
        const __half2 h = __floats2half2_rn(s * w.x, s * w.y);
        pw[j] = *reinterpret_cast<const uint32_t*>(&h);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int q = 8 * k + j, rl = L::row_of(lane, q);
        const int cc = L::col_of(lane, q, 0);  // code column of the chunk (even)
        const int64_t row = tile * kRows + rl;
        if constexpr (!SP) {
          if (mt.perm == nullptr) {  // pairs j and j + 2 (columns + 8) of one row, swapped with t ^ 1
            if (j % 4 >= 2) continue;
            const bool odd = tq & 1;
            const uint32_t a = pw[j], b = pw[j + 2];
            const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
            if (row >= mt.n_out) continue;
            const int col = c * C::kSpan + (odd ? cc + 6 : cc);  // 4 columns from here
            *reinterpret_cast<uint2*>(out + row * g.n_in + col) = odd ? make_uint2(got, b) : make_uint2(a, got);
            continue;
          }
        }
        if (row >= mt.n_out) continue;
        __half* orow = out + row * g.n_in;
        const uint32_t lb = pw[j] & 0xffffu, hb = pw[j] >> 16;
        if constexpr (SP) {
          const int kb = q / 4, quad = cc % 16 / 2;
          const uint2 mw = mt.hi[tc * 32 + L::meta_lane(rl, kb, quad)];
          const uint32_t nib = (L::meta_word(kb) ? mw.y : mw.x) >> L::meta_bit(rl, quad);
          const int col = 2 * (c * C::kSpan + cc);  // the quad's first column
          const uint32_t p0 = nib & 3u, p1 = nib >> 2 & 3u;
          uint32_t v[4];  // the quad's f16 bits, kept positions p0 (lo) and p1 (hi), zeros beside
#pragma unroll
          for (uint32_t e = 0; e < 4; ++e) v[e] = e == p0 ? lb : e == p1 ? hb : 0u;
          if (mt.perm == nullptr) {  // one 8-byte store (n_in % 64 == 0: aligned)
            *reinterpret_cast<uint2*>(orow + col) = make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) orow[mt.perm[col + e]] = __ushort_as_half(static_cast<unsigned short>(v[e]));
          }
        } else {  // act-order
          const int col = c * C::kSpan + cc;
          orow[mt.perm[col]] = __ushort_as_half(static_cast<unsigned short>(lb));
          orow[mt.perm[col + 1]] = __ushort_as_half(static_cast<unsigned short>(hb));
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
