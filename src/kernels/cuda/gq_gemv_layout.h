// The GEMV layout (kLayoutGemv, kernels/cuda_gq.h) in one place: the packer (gq_gemv_pack.cpp)
// writes it, the kernels (gq_gemv.cu) read it. Plain C++, usable in host and device code.
//
// The kernels multiply on integer tensor cores (mma.sync m16n8k32, u8 weights as the row-major A
// operand, 16 rows x 32 columns; x quantized to s8 as B), so the codes are stored in A-fragment
// order: a few bit operations turn a word of codes into the u8 registers the MMA reads.
//
// Tiles and chunks. Rows go in tiles of kTileRows = 16 (one MMA's rows). Lane l = 4g + t of a warp
// holds rows g and g + 8 of the tile. A chunk is 16 bytes of codes of one lane: chunk_codes(bits)
// codes (int4 32, int2/int3 64 (int3: the two low bits; an 8-byte "hi" chunk holds the third),
// int8 16), which is kblocks(bits) = chunk_codes / 16 consecutive k32 blocks (16 codes of the lane
// per block); the 32 lanes' chunk c covers the tile's 16 rows x chunk_span(bits) = 32 kblocks
// columns [c * span, (c + 1) * span). One warp load of chunk c reads 512 contiguous bytes.
//   codes  [tiles][chunks][32] 16-byte chunks        (rows past n_out, columns past n_in: zero)
//   hi     [tiles][chunks][32] 8-byte chunks         (int3 only)
//   recs   [tiles][n_groups][8][2] u32: row g, row g + 8 of the tile; f16 scale | u16 zero << 16
//   perm   [n_in] i32                                (act-order only)
// Sections start at multiples of 256 bytes; PackedWeight::section[0..3] = codes, hi, recs, perm.
//
// Registers. The A fragment of k32 block kb has four registers of four u8 codes each: reg = h + 2v
// holds row g + 8h, columns 32 kb + 16 v + 4t + i (byte i). A unit of 32 columns (one k32 block)
// never straddles a group (groups are multiples of 32 columns): one scale record per unit and row.
//
// Where the code of (kb, reg, byte i) sits in the lo chunk (words 0..3), and how a kernel gets the
// register (masks keep every byte's code in its own byte):
//   int8:      word reg, bit 8i                       reg = word
//   int4:      word 2 kb + reg / 2, bit 8i + 4 (reg % 2)   (word >> 4 (reg % 2)) & 0x0f0f0f0f
//   int2/int3: word kb, bit 8i + 2 reg                (word >> 2 reg) & 0x03030303
// int3's third bit sits in hi word kb / 2 at bit (2 + 8i + s) mod 32, s = 4 (kb % 2) + reg: rotating
// that word right by s puts it at bit 2 of byte i, (rot & 0x04040404) | the two low bits (the
// eight values of s fill the 32 bits).
#pragma once

#include <cstdint>

#include "lithe/core/packed.h"

namespace lithe::cuda::gemv_layout {

inline constexpr int kTileRows = 16;     // rows of a tile: one MMA's A rows
inline constexpr int kUnitCols = 32;     // columns per scale record: one k32 block
inline constexpr int64_t kAlign = 256;   // section alignment in bytes
inline constexpr int kMaxNIn = 1 << 21;  // keeps the kernels' unit -> group division exact

constexpr int chunk_codes(int bits) { return bits == 8 ? 16 : bits == 4 ? 32 : 64; }  // per lane
constexpr int kblocks(int bits) { return chunk_codes(bits) / 16; }                 // k32 blocks per chunk
constexpr int chunk_span(int bits) { return 32 * kblocks(bits); }                  // columns per chunk

// Register and byte of (row r of the tile, column c of a k32 block), and the lane holding it.
constexpr int lane_at(int r, int c) { return 4 * (r % 8) + c % 16 / 4; }
constexpr int reg_at(int r, int c) { return r / 8 + 2 * (c / 16); }
constexpr int byte_at(int c) { return c % 4; }
// The inverse: row of the tile and column of the k32 block of (lane, reg, byte i).
constexpr int row_of(int lane, int reg) { return lane / 4 + 8 * (reg % 2); }
constexpr int col_of(int lane, int reg, int i) { return 16 * (reg / 2) + 4 * (lane % 4) + i; }

// Where (k32 block kb of the chunk, reg, byte i) keeps its code in the lo chunk: word and bit.
constexpr int lo_word(int bits, int kb, int reg) { return bits == 8 ? reg : bits == 4 ? 2 * kb + reg / 2 : kb; }
constexpr int lo_bit(int bits, int reg, int i) {
  return 8 * i + (bits == 8 ? 0 : bits == 4 ? 4 * (reg % 2) : 2 * reg);
}
// int3: the hi word (0 or 1 of the 8-byte hi chunk), its rotation and the bit of the third bit.
constexpr int hi_word(int kb) { return kb / 2; }
constexpr int hi_rot(int kb, int reg) { return 4 * (kb % 2) + reg; }
constexpr int hi_bit(int kb, int reg, int i) { return (2 + 8 * i + hi_rot(kb, reg)) % 32; }

inline int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Sizes and section offsets of a packed matrix.
struct Geometry {
  int64_t tiles = 0, chunks = 0, groups = 0, units = 0;
  int64_t codes = 0, hi = 0, recs = 0, perm = 0, bytes = 0;  // byte offsets, total
};
inline Geometry geometry(const QuantFormat& f, int64_t n_out, int64_t n_in, bool has_perm) {
  Geometry g;
  g.tiles = (n_out + kTileRows - 1) / kTileRows;
  g.chunks = (n_in + chunk_span(f.bits) - 1) / chunk_span(f.bits);
  g.groups = f.group > 0 ? (n_in + f.group - 1) / f.group : 0;
  g.units = n_in / kUnitCols;
  const int64_t lanes = g.tiles * g.chunks * 32;
  g.codes = 0;
  g.hi = align_up(lanes * 16);
  g.recs = align_up(g.hi + (f.bits == 3 ? lanes * 8 : 0));
  g.perm = align_up(g.recs + g.tiles * g.groups * kTileRows * 4);
  g.bytes = align_up(g.perm + (has_perm ? n_in * 4 : 0));
  return g;
}

}  // namespace lithe::cuda::gemv_layout
