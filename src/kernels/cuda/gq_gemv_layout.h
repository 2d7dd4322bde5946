// The GEMV layout (kLayoutGemv, kernels/cuda_gq.h) in one place: the packer (gq_gemv_pack.cpp)
// writes it, the kernels (gq_gemv.cu) read it. Plain C++, usable in host and device code.
//
// Chunks. A chunk is 16 bytes of codes of one row: 64 columns (int2; int3 adds an 8-byte "hi"
// chunk with the third bit of each code), 32 columns (int4) or 16 columns (int8). Kernel columns
// are cut into units of 32 (int8: 16) that never straddle a group, since groups are multiples of
// 32 columns: one scale record per unit, so the scale is applied once per unit and per x row.
// Rows are padded to whole chunks (int2/int3 when n_in % 64 == 32: the second unit of the last
// chunk is padding, skipped by the kernels).
//
// Tiles. Rows go in tiles of kTileRows = 32, one per lane: a tile's codes are stored chunk by
// chunk, chunk c of its 32 rows side by side, so one warp load of chunk c reads 512 contiguous
// bytes and all 32 lanes then need the same x values (one L1 / shared-memory broadcast).
//   codes  [tiles][chunks][32] 16-byte chunks        (rows past n_out: zero bytes)
//   hi     [tiles][chunks][32] 8-byte chunks         (int3 only)
//   recs   [tiles][n_groups][32] u32: f16 scale | f16 (-(1024 + zero)) << 16
//   perm   [n_in] i32                                (act-order only)
// Sections start at multiples of 256 bytes; PackedWeight::section[0..3] = codes, hi, recs, perm.
//
// Inside a chunk. The kernels turn codes into f16 pairs with one LOP3 (int8: one PRMT) against the
// magic 0x6400 (f16 1024, whose ulp is 1): (word & mask) | 0x64006400 is the pair
// (1024 + c0 * 2^(b*j), 1024 + c1 * 2^(b*j)) when both codes sit at bit b*j of the two halves.
// Pair q of a chunk covers columns 2q (low half) and 2q + 1 (high half); 32-bit word w = q / PPW of
// the chunk holds pairs p = q % PPW at "shift" s = p / J (the word, or the word >> 8) and "class"
// j = p % J (bit b*j of each half):
//   int2/int3: b = 2, J = 4, PPW = 8: low two bits of the code at bit 8s + 2j + 16h
//   int4:      b = 4, J = 2, PPW = 4: the code at bit 8s + 4j + 16h
//   int8:      J = 1, PPW = 2: byte p + 2h (PRMT picks bytes p and p + 2 beside 0x64 bytes)
// int3's third bit must land just above the two low bits (bit 2j + 2 of the half) after the
// kernel rotates hi word w / 2 right by 8 * (w % 2) + s: it is stored at bit
// (2j + 2 + 16h + 8 * (w % 2) + s) mod 32 of that word (the four rotations fill the 32 bits).
#pragma once

#include <cstdint>

#include "lithe/core/packed.h"

namespace lithe::cuda::gemv_layout {

inline constexpr int kTileRows = 32;     // rows of a tile: one per lane
inline constexpr int64_t kAlign = 256;   // section alignment in bytes
inline constexpr int kMaxNIn = 1 << 21;  // keeps the kernels' unit -> group division exact

constexpr int chunk_cols(int bits) { return bits == 8 ? 16 : bits == 4 ? 32 : 64; }
constexpr int unit_cols(int bits) { return bits == 8 ? 16 : 32; }
constexpr int pairs_per_word(int bits) { return chunk_cols(bits) / 8; }
constexpr int classes(int bits) { return bits == 8 ? 1 : bits == 4 ? 2 : 4; }
constexpr int class_bits(int bits) { return bits == 4 ? 4 : 2; }  // int2/int3/int4

// Where pair q, half h (column 2q + h of the chunk) keeps its code in the lo chunk: word and bit
// (int8: bit of the byte).
constexpr int lo_word(int bits, int q) { return q / pairs_per_word(bits); }
constexpr int lo_bit(int bits, int q, int h) {
  const int p = q % pairs_per_word(bits);
  if (bits == 8) return 8 * (p + 2 * h);
  const int s = p / classes(bits), j = p % classes(bits);
  return 8 * s + class_bits(bits) * j + 16 * h;
}
// int3: the hi word (0 or 1 of the 8-byte hi chunk) and bit of pair q, half h.
constexpr int hi_word(int q) { return lo_word(3, q) / 2; }
constexpr int hi_rot(int q) { return 8 * (lo_word(3, q) % 2) + (q % 8) / 4; }
constexpr int hi_bit(int q, int h) { return (2 * ((q % 8) % 4) + 2 + 16 * h + hi_rot(q)) % 32; }

inline int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Sizes and section offsets of a packed matrix.
struct Geometry {
  int64_t tiles = 0, chunks = 0, groups = 0, units = 0;
  int64_t codes = 0, hi = 0, recs = 0, perm = 0, bytes = 0;  // byte offsets, total
};
inline Geometry geometry(const QuantFormat& f, int64_t n_out, int64_t n_in, bool has_perm) {
  Geometry g;
  g.tiles = (n_out + kTileRows - 1) / kTileRows;
  g.chunks = (n_in + chunk_cols(f.bits) - 1) / chunk_cols(f.bits);
  g.groups = f.group > 0 ? (n_in + f.group - 1) / f.group : 0;
  g.units = n_in / unit_cols(f.bits);
  const int64_t lanes = g.tiles * g.chunks * kTileRows;
  g.codes = 0;
  g.hi = align_up(lanes * 16);
  g.recs = align_up(g.hi + (f.bits == 3 ? lanes * 8 : 0));
  g.perm = align_up(g.recs + g.tiles * g.groups * kTileRows * 4);
  g.bytes = align_up(g.perm + (has_perm ? n_in * 4 : 0));
  return g;
}

}  // namespace lithe::cuda::gemv_layout
