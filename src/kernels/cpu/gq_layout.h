// Geometry of the CPU gq layout (kLayoutCpuGq, described in lithe/kernels/cpu.h), shared by the
// packer (gq_pack.cpp), the entry points (cpu_ops.cpp) and every kernel set. Plain data and
// static helpers only: the ISA translation units include it (see kernel_table.h).
#pragma once

#include <cstdint>

namespace lithe::cpu::detail {

inline constexpr int64_t kGqUnit = 128;  // kernel columns per unit (4 blocks of 32)
inline constexpr int64_t kGqBlock = 32;  // columns per activation scale (int8 mode)
// Prepared activation bytes per unit (GqActs): int8 / int16 mode 128 quants + 4 block scales in
// the record layout of the ISA (<= 192 / 320 bytes); f32 mode 128 floats.
inline constexpr int64_t kGqActI8UnitBytes = 192;
inline constexpr int64_t kGqActI16UnitBytes = 320;
inline constexpr int64_t kGqActF32UnitBytes = 512;

struct GqGeom {
  int bits = 0;
  int64_t n_out = 0, n_in = 0, group = 0;
  int64_t units = 0;          // ceil(n_in / 128)
  int tail_blocks = 0;        // blocks of 32 in a last partial unit; 0 when 128 divides n_in
  int64_t unit_bytes = 0;     // code bytes of a whole unit: 16 * bits
  int64_t tail_bytes = 0;     // code bytes of the partial unit (0 if none)
  int64_t code_row_bytes = 0;
  int64_t code_off = 0;       // a packed row: scales (f16) | zeros (asym only) | codes
  int64_t row_stride = 0;
  bool block_mode = false;    // one scale entry per block of 32 (else one per group)
  int64_t n_ent = 0;          // scale entries per row
  int64_t ent_stride = 0;     // n_ent rounded up to 4: scales and zeros per packed row
  int64_t units_per_ent = 0;  // group mode: units an entry spans (the last entry may have fewer)
  int64_t xs_stride = 0;      // n_ent rounded up to 16: activation entry sums per row
};

static inline int64_t gq_round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Geometry of a supported shape (gq_supports() in cpu.h says which are).
static inline GqGeom gq_geom(int bits, int64_t group, bool sym, int64_t n_out, int64_t n_in) {
  GqGeom g;
  g.bits = bits;
  g.n_out = n_out;
  g.n_in = n_in;
  g.group = group;
  g.units = (n_in + kGqUnit - 1) / kGqUnit;
  g.tail_blocks = static_cast<int>((n_in % kGqUnit) / kGqBlock);
  g.unit_bytes = 16 * bits;
  // int4 / int8 tails are compact; the plane layouts of int2 / int3 keep whole units.
  g.tail_bytes = g.tail_blocks == 0 ? 0 : (bits == 4 || bits == 8) ? 4 * bits * g.tail_blocks : g.unit_bytes;
  g.code_row_bytes = (g.units - (g.tail_blocks ? 1 : 0)) * g.unit_bytes + g.tail_bytes;
  g.block_mode = !(group % kGqUnit == 0 || group == n_in);
  if (g.block_mode) {
    g.n_ent = n_in / kGqBlock;
    g.units_per_ent = 0;
  } else {
    g.n_ent = (n_in + group - 1) / group;
    g.units_per_ent = group % kGqUnit == 0 ? group / kGqUnit : g.units;
  }
  g.ent_stride = gq_round_up(g.n_ent, 4);
  g.code_off = 2 * g.ent_stride + (sym ? 0 : g.ent_stride);
  g.row_stride = g.code_off + g.code_row_bytes;
  g.xs_stride = gq_round_up(g.n_ent, 16);
  return g;
}

// Entry of block b (of 32 columns) of a row.
static inline int64_t gq_entry_of_block(const GqGeom& g, int64_t b) {
  return g.block_mode ? b : b * kGqBlock / g.group;
}

// Position of value v (< 128) of a unit in the A / B halves: half 0 (A) or 1 (B), index i < 64.
static inline void gq_ab_of(int v, int& half, int& i) {
  const int blk = v / 32, j = v % 32;
  half = j / 16;
  i = 16 * blk + j % 16;
}

}  // namespace lithe::cpu::detail
