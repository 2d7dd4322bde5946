// The Marlin-class int4 GEMM's packed weight layout, shared by the host packer (marlin_pack.cpp)
// and the kernel (marlin.cu). Plain C++ (no CUDA): included by both. The layout itself is
// documented at the top of marlin_pack.cpp.
#pragma once

#include <cstdint>

namespace lithe::cuda::marlin {

// PackedWeight::section indices of the Marlin layout. Absent sections (zeros when sym, perm when
// not act-order) have zero length: their offset equals the next section's.
inline constexpr int kSecCodes = 0;   // u32 [k_pad/16][n_out/64][32 lanes][4 words] (2:4: [k_pad/32]...)
inline constexpr int kSecScales = 1;  // f16 [n_groups][n_out], each run of 64 columns permuted
inline constexpr int kSecZeros = 2;   // u8  [n_groups][n_out], permuted as the scales (asym only)
inline constexpr int kSecPerm = 3;    // i32 [n_in] (act-order only)
inline constexpr int kSecMeta = 4;    // u32 [k_pad/32][n_out/64][32 lanes][2 words] (2:4 only)
inline constexpr int kSecEnd = 5;     // one past the last section: the total bytes

// k (n_in) is padded with zero codes to a multiple of this (the largest k tile), so that every
// k tile a kernel reads lies inside the packed codes; the activations are padded with zeros alike.
inline constexpr int64_t kKPad = 128;
inline constexpr int64_t padded_k(int64_t n_in) { return (n_in + kKPad - 1) / kKPad * kKPad; }
inline constexpr int64_t kSectionAlign = 256;

// Position p (0..63) of a 64-column run of scales / zeros holds column
//   16 * j + 8 * h + g   where p = 8 * g + 2 * j + h  (g = 0..7, j = 0..3, h = 0..1),
// so that the 8 values a thread with mma group g needs (columns g, 8+g, 16+g, ... 56+g of its
// warp's 64) are 8 consecutive entries.
inline constexpr int scale_column(int p) { return 16 * ((p >> 1) & 3) + 8 * (p & 1) + (p >> 3); }

// Nibble i (bits 4i..4i+3) of the word for (k16 tile, 64-column run, lane, word j) holds
// B[k][n] = code[n][k] with
//   k = 16 * kt + 2 * t + kNibbleK[i],  n = 64 * nb + 16 * j + g + kNibbleN[i],  g = lane / 4, t = lane % 4.
// This is the m16n8k16 B fragment (b0,b1: k = 2t, 2t+1; b2,b3: k = 2t+8, 2t+9; n = g) of the two
// 8-column blocks 16j..16j+7 and 16j+8..16j+15, ordered so that the dequantization (mask nibbles
// {0,4} / {1,5}, shift by 8, mask {2,6} / {3,7}) yields the four f16x2 fragment registers in order.
inline constexpr int kNibbleK[8] = {0, 8, 0, 8, 1, 9, 1, 9};
inline constexpr int kNibbleN[8] = {0, 0, 8, 8, 0, 0, 8, 8};

// 2:4 sparse variant: the weights are the sparse A operand of mma.sp m16n8k32 (16 output columns
// x 32 of k, compressed to 16 x 16: two kept values per aligned run of 4 of k, a "chunk"). Word f
// of lane l (g = l/4, t = l%4) for (k32 tile kt, 64-column run nb) covers output columns
// 64nb + 16f .. +15; its nibble i is kept value kSpElem[i] (0: the one at the lower k) of chunk
// t + 4 * kSpChunkHi[i] (k = 32kt + 4 * chunk ..) of output column 64nb + 16f + g + kNibbleN[i].
// With the dequantization above this yields the A fragment registers in the order a0a1, a4a5,
// a2a3, a6a7 (row g chunk t, row g chunk t+4, row g+8 chunk t, row g+8 chunk t+4) and the same
// scale / zero entries per register as the dense layout (entry 2f: row g, 2f+1: row g+8).
inline constexpr int kSpChunkHi[8] = {0, 1, 0, 1, 0, 1, 0, 1};
inline constexpr int kSpElem[8] = {0, 0, 0, 0, 1, 1, 1, 1};
// Metadata word q (0, 1) of lane l for (kt, nb): the mma of column block f = 2q + (t >> 1) runs
// with sparsity selector f & 1, so lanes t = 0, 1 hold blocks 0 and 2, lanes t = 2, 3 blocks 1
// and 3. Bits 0..15: output column 16f + g, bits 16..31: column 16f + 8 + g, both for the k half
// h = t & 1 (k = 32kt + 16h ..); within 16 bits, chunk c (0..3) of the half at bits 4c..4c+3:
// the index (0..3) of its lower kept value in bits 4c..4c+1, of the higher one in 4c+2..4c+3.

}  // namespace lithe::cuda::marlin
