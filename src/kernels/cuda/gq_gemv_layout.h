// The GEMV layout (kLayoutGemv, kernels/cuda_gq.h) in one place: the packer (gq_gemv_pack.cpp)
// writes it, the kernels (gq_gemv.cu) read it. Plain C++, usable in host and device code.
//
// The kernels multiply on tensor cores (mma.sync m16n8k16, weights as the row-major A operand,
// 16 rows x 16 columns; x as B), so the codes are stored in A-fragment order: the dequantized
// f16 pairs land in the very registers the MMA reads, with no shuffles.
//
// Tiles and chunks. Rows go in tiles of kTileRows = 16 (one MMA's rows). Lane l = 4g + t of a warp
// holds rows g and g + 8 of the tile. A chunk is 16 bytes of codes of one lane: chunk_codes(bits)
// codes (int4 32, int2/int3 64 (int3: the two low bits; an 8-byte "hi" chunk holds the third),
// int8 16), which is kblocks(bits) = chunk_codes / 8 consecutive k16 blocks (8 codes of the lane
// per block); the 32 lanes' chunk c covers the tile's 16 rows x chunk_span(bits) = 16 kblocks
// columns [c * span, (c + 1) * span). One warp load of chunk c reads 512 contiguous bytes.
//   codes  [tiles][chunks][32] 16-byte chunks        (rows past n_out, columns past n_in: zero)
//   hi     [tiles][chunks][32] 8-byte chunks         (int3 only)
//   recs   [tiles][n_groups][8][2] u32: row g, row g + 8 of the tile; f16 scale | f16 -(1024 + zero) << 16
//   perm   [n_in] i32                                (act-order only)
//   meta   [tiles][chunks][32] 8-byte chunks         (2:4 sparse only, below; in hi's place)
// Sections start at multiples of 256 bytes; PackedWeight::section[0..3] = codes, hi (or meta), recs,
// perm.
//
// 2:4 sparse int4 (runs_sparse: the descriptor's fmt.sparse24, set by the packer only where it
// runs so; other 2:4 matrices are packed dense). The weights are the sparse A operand of mma.sp
// m16n8k32: the layout above holds a "code matrix" of n_in / 2 columns, the two kept codes of each
// aligned run of 4 columns (a "quad" q of columns 4q..4q + 3: code column 2q + e is its kept code e,
// the lower position first), with groups of group / 2 code columns, so a chunk's 4 k16 blocks of
// code columns are 4 k32 blocks (128 columns) of x. Kept are the codes != zero point (at most 2,
// validate() checks) and, where fewer, the lowest other positions (code == zero point: weight 0).
// Meta word k of lane l = 4g + t of a chunk serves the MMAs of code blocks 2k and 2k + 1 (the
// sparsity selector s = t >> 1 picks block 2k + s; lanes t = 2s, 2s + 1 give its metadata): bits
// 0..15 row g, 16..31 row g + 8; nibble c (bits 4c..) of a row: quad 4 (t & 1) + c of the block's
// 8, kept positions e0 | e1 << 2 (e0 < e1; padding quads past n_in: 0, 1).
//
// Pairs. A chunk holds 4 * kblocks f16 pairs q: pair q is A-fragment register reg = q % 4 of k16
// block kb = q / 4: row g + 8 * (reg & 1), columns 16 kb + 2t + 8 (reg >> 1) + {0 (low half), 1}
// (registers a0a1, a2a3, a4a5, a6a7 of the PTX fragment). Units of 32 columns (two k16 blocks)
// never straddle a group (groups are multiples of 32 columns): one scale record per unit and row.
//
// Inside a chunk. The kernels turn codes into f16 pairs with one LOP3 (int8: one PRMT) against the
// magic 0x6400 (f16 1024, whose ulp is 1): (word & mask) | 0x64006400 is the pair
// (1024 + c0 * 2^(b*j), 1024 + c1 * 2^(b*j)) when both codes sit at bit b*j of the two halves.
// 32-bit word w = q / PPW of the chunk holds pairs p = q % PPW at "shift" s = p / J (the word, or
// the word >> 8) and "class" j = p % J (bit b*j of each half):
//   int2/int3: b = 2, J = 4, PPW = 8: low two bits of the code at bit 8s + 2j + 16h
//   int4:      b = 4, J = 2, PPW = 4: the code at bit 8s + 4j + 16h
//   int8:      J = 1, PPW = 2: byte p + 2h (PRMT picks bytes p and p + 2 beside 0x64 bytes)
// So a word is one k16 block (int4), two (int2/int3) or half of one (int8), and the class of pair q
// depends only on reg (int4: j = reg & 1, int2/int3: j = reg, int8: 0).
// int3's third bit must land just above the two low bits (bit 2j + 2 of the half) after the
// kernel rotates hi word w / 2 right by 8 * (w % 2) + s: it is stored at bit
// (2j + 2 + 16h + 8 * (w % 2) + s) mod 32 of that word (the four rotations fill the 32 bits).
#pragma once

#include <cstdint>

#include "lithe/core/packed.h"

namespace lithe::cuda::gemv_layout {

inline constexpr int kTileRows = 16;     // rows of a tile: one MMA's A rows
inline constexpr int kUnitCols = 32;     // columns per scale record
inline constexpr int64_t kAlign = 256;   // section alignment in bytes
inline constexpr int kMaxNIn = 1 << 21;  // keeps the kernels' unit -> group division exact

constexpr int chunk_codes(int bits) { return bits == 8 ? 16 : bits == 4 ? 32 : 64; }  // per lane
constexpr int kblocks(int bits) { return chunk_codes(bits) / 8; }                  // k16 blocks per chunk
constexpr int chunk_span(int bits) { return 16 * kblocks(bits); }                  // columns per chunk
constexpr int pairs_per_word(int bits) { return chunk_codes(bits) / 8; }
constexpr int classes(int bits) { return bits == 8 ? 1 : bits == 4 ? 2 : 4; }
constexpr int class_bits(int bits) { return bits == 4 ? 4 : 2; }  // int2/int3/int4
// The class of A register reg (every k16 block alike).
constexpr int class_of_reg(int bits, int reg) { return bits == 8 ? 0 : reg % classes(bits); }

// Where pair q, half h keeps its code in the lo chunk: word and bit (int8: bit of the byte).
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

// Pair q, half h of lane l's chunk: the row of the tile and the column of the chunk's span.
constexpr int row_of(int lane, int q) { return lane / 4 + 8 * (q % 4 % 2); }
constexpr int col_of(int lane, int q, int h) { return 16 * (q / 4) + 2 * (lane % 4) + 8 * (q % 4 / 2) + h; }
// The inverse: lane, pair and half of (row r of the tile, column c of the chunk's span).
constexpr int lane_at(int r, int c) { return 4 * (r % 8) + c % 8 / 2; }
constexpr int pair_at(int r, int c) { return 4 * (c / 16) + r / 8 + 2 * (c % 16 / 8); }
constexpr int half_at(int c) { return c % 2; }

inline int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Whether a 2:4 matrix of format f runs as sparse (else dense): int4, n_in and group multiples of 64
// (a 32-column unit of code columns, 64 of x, never straddles a group).
inline bool runs_sparse(const QuantFormat& f, int64_t n_in) {
  return f.sparse24 && f.bits == 4 && n_in % 64 == 0 && f.group % 64 == 0;
}
// Columns of x per code column: 2 for sparse matrices.
constexpr int x_per_code(bool sparse) { return sparse ? 2 : 1; }
// Columns of x a chunk covers.
constexpr int x_span(int bits, bool sparse) { return chunk_span(bits) * x_per_code(sparse); }
// The meta word of lane l for 2:4 quad `quad` (0..7) of code block kb (0..3) of a chunk, row r of
// the tile: lane, word and bit of its nibble.
constexpr int meta_lane(int r, int kb, int quad) { return 4 * (r % 8) + 2 * (kb % 2) + quad / 4; }
constexpr int meta_word(int kb) { return kb / 2; }
constexpr int meta_bit(int r, int quad) { return 16 * (r / 8) + 4 * (quad % 4); }

// Sizes and section offsets of a packed matrix (f.sparse24: the sparse layout; chunks, groups and
// units count code columns).
struct Geometry {
  int64_t tiles = 0, chunks = 0, groups = 0, units = 0;
  int64_t codes = 0, hi = 0, recs = 0, perm = 0, bytes = 0;  // byte offsets, total
};
inline Geometry geometry(const QuantFormat& f, int64_t n_out, int64_t n_in, bool has_perm) {
  Geometry g;
  const int xs = x_per_code(f.sparse24);
  const int64_t cols = n_in / xs, group = f.group / xs;  // code columns
  g.tiles = (n_out + kTileRows - 1) / kTileRows;
  g.chunks = (cols + chunk_span(f.bits) - 1) / chunk_span(f.bits);
  g.groups = group > 0 ? (cols + group - 1) / group : 0;
  g.units = cols / kUnitCols;
  const int64_t lanes = g.tiles * g.chunks * 32;
  g.codes = 0;
  g.hi = align_up(lanes * 16);
  g.recs = align_up(g.hi + (f.bits == 3 || f.sparse24 ? lanes * 8 : 0));
  g.perm = align_up(g.recs + g.tiles * g.groups * kTileRows * 4);
  g.bytes = align_up(g.perm + (has_perm ? n_in * 4 : 0));
  return g;
}

}  // namespace lithe::cuda::gemv_layout
