// Byte layouts of the ggml / GGUF block quantization types, as stored in GGUF files and in
// memory. Every struct is packed (alignment 1), so a block may be read in place from any byte
// address (an mmapped tensor, a row at an odd offset); sizes match ggml's and dtype.cpp's kTraits.
//
// Conventions used in the field comments:
//   f16      IEEE half, little-endian bits (decode with lithe::f16_to_f32)
//   value j  the j-th of the block's values, 0-based, in row order
//   "low/high nibble" of a byte: bits 0-3 / bits 4-7
//
// Two block sizes: QK = 32 for the "legacy" types (q4_0 ... q8_1) and QK_K = 256 for the
// k-quants, whose super-block holds 8 sub-blocks of 32 (q4_k, q5_k) or 16 of 16 (q2_k, q3_k, q6_k)
// values, each with its own small integer scale (and min) multiplied by the super-block's f16
// scale(s).
#pragma once

#include <cstdint>

#if defined(__GNUC__) || defined(__clang__)
#define LITHE_PACKED __attribute__((packed))
#else
#error "ggml_blocks.h needs a compiler with __attribute__((packed))"
#endif

namespace lithe::ggml {

inline constexpr int kQK = 32;    // values per block of the legacy types
inline constexpr int kQK_K = 256;  // values per super-block of the k-quants
inline constexpr int kScaleBytesK = 12;  // packed 6-bit scales of q3_k / q4_k / q5_k

// q4_0: value j = d * (nibble_j - 8), nibble_j in 0..15.
struct LITHE_PACKED BlockQ4_0 {
  uint16_t d;           // f16 scale
  uint8_t qs[kQK / 2];  // byte i: low nibble = value i, high nibble = value i + 16
};
static_assert(sizeof(BlockQ4_0) == 18);

// q4_1: value j = d * nibble_j + m, nibble_j in 0..15.
struct LITHE_PACKED BlockQ4_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset (the block minimum)
  uint8_t qs[kQK / 2];  // byte i: low nibble = value i, high nibble = value i + 16
};
static_assert(sizeof(BlockQ4_1) == 20);

// q5_0: value j = d * (q_j - 16), q_j in 0..31 = nibble | (high bit << 4).
struct LITHE_PACKED BlockQ5_0 {
  uint16_t d;           // f16 scale
  uint8_t qh[4];        // little-endian uint32; bit j = bit 4 of q_j (j = 0..31)
  uint8_t qs[kQK / 2];  // byte i: low nibble = bits 0-3 of q_i, high nibble = bits 0-3 of q_{i+16}
};
static_assert(sizeof(BlockQ5_0) == 22);

// q5_1: value j = d * q_j + m, q_j in 0..31 = nibble | (high bit << 4).
struct LITHE_PACKED BlockQ5_1 {
  uint16_t d;           // f16 scale
  uint16_t m;           // f16 offset (the block minimum)
  uint8_t qh[4];        // little-endian uint32; bit j = bit 4 of q_j (j = 0..31)
  uint8_t qs[kQK / 2];  // byte i: low nibble = bits 0-3 of q_i, high nibble = bits 0-3 of q_{i+16}
};
static_assert(sizeof(BlockQ5_1) == 24);

// q8_0: value j = d * qs[j].
struct LITHE_PACKED BlockQ8_0 {
  uint16_t d;       // f16 scale
  int8_t qs[kQK];   // value j's quant
};
static_assert(sizeof(BlockQ8_0) == 34);

// q8_1: value j = d * qs[j]; s caches d * sum(qs) for dot products (ignored when dequantizing).
struct LITHE_PACKED BlockQ8_1 {
  uint16_t d;      // f16 scale
  uint16_t s;      // f16 of d * sum_j qs[j] (ggml uses d before its f16 rounding, lithe the stored d)
  int8_t qs[kQK];  // value j's quant
};
static_assert(sizeof(BlockQ8_1) == 36);

// q2_k: 16 sub-blocks of 16 values; value j (sub-block b = j / 16) =
//   d * (scales[b] & 0xF) * q_j - dmin * (scales[b] >> 4),   q_j in 0..3.
// Quant bits: with h = j / 128, r = j % 128: q_j = (qs[32 * h + r % 32] >> (2 * (r / 32))) & 3.
struct LITHE_PACKED BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // byte b: low nibble = scale of sub-block b, high nibble = its min
  uint8_t qs[kQK_K / 4];       // 2-bit quants, 4 per byte (layout above)
  uint16_t d;                  // f16 super-block scale of the scales
  uint16_t dmin;               // f16 super-block scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84);

// q3_k: 16 sub-blocks of 16 values; value j (sub-block b = j / 16) = d * (s_b - 32) * q_j,
//   s_b in 0..63 (6-bit, bias 32), q_j in -4..3.
// With h = j / 128, r = j % 128, g = r / 32, l = r % 32:
//   low  = (qs[32 * h + l] >> (2 * g)) & 3,   hbit = (hmask[l] >> (4 * h + g)) & 1,
//   q_j  = low - (hbit ? 0 : 4)                (a set hmask bit means "no -4 offset").
// Scales s_b (b = 0..15): bits 0-3 = b < 8 ? scales[b] & 0xF : scales[b - 8] >> 4,
//                         bits 4-5 = (scales[8 + b % 4] >> (2 * (b / 4))) & 3.
struct LITHE_PACKED BlockQ3_K {
  uint8_t hmask[kQK_K / 8];      // bit 2 of (q_j + 4), layout above
  uint8_t qs[kQK_K / 4];         // bits 0-1 of (q_j + 4), 4 per byte
  uint8_t scales[kScaleBytesK];  // sixteen 6-bit scales, packing above
  uint16_t d;                    // f16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110);

// q4_k: 8 sub-blocks of 32 values; value j (sub-block b = j / 32) =
//   d * sc_b * q_j - dmin * m_b,   sc_b, m_b in 0..63 (6-bit), q_j in 0..15.
// Quants: with c = j / 64, r = j % 64: q_j = r < 32 ? qs[32 * c + r] & 0xF : qs[32 * c + r - 32] >> 4.
// Scales (ggml's get_scale_min_k4), b = 0..3: sc_b = scales[b] & 63,        m_b = scales[b + 4] & 63;
//                                   b = 4..7: sc_b = (scales[b + 4] & 0xF) | (scales[b - 4] >> 6) << 4,
//                                             m_b  = (scales[b + 4] >> 4)  | (scales[b] >> 6) << 4.
struct LITHE_PACKED BlockQ4_K {
  uint16_t d;                    // f16 super-block scale of the sub-block scales
  uint16_t dmin;                 // f16 super-block scale of the sub-block mins
  uint8_t scales[kScaleBytesK];  // eight 6-bit scales and eight 6-bit mins, packing above
  uint8_t qs[kQK_K / 2];         // 4-bit quants, layout above
};
static_assert(sizeof(BlockQ4_K) == 144);

// q5_k: as q4_k with a fifth quant bit: q_j in 0..31 = nibble_j | hbit_j << 4, where nibble_j is
// read as q4_k's q_j and, with c = j / 64, r = j % 64: hbit_j = (qh[r % 32] >> (2 * c + r / 32)) & 1.
struct LITHE_PACKED BlockQ5_K {
  uint16_t d;                    // f16 super-block scale of the sub-block scales
  uint16_t dmin;                 // f16 super-block scale of the sub-block mins
  uint8_t scales[kScaleBytesK];  // eight 6-bit scales and mins, packed as in q4_k
  uint8_t qh[kQK_K / 8];         // bit 4 of each quant, layout above
  uint8_t qs[kQK_K / 2];         // bits 0-3 of each quant, layout as q4_k's qs
};
static_assert(sizeof(BlockQ5_K) == 176);

// q6_k: 16 sub-blocks of 16 values; value j (sub-block b = j / 16) = d * scales[b] * (q_j - 32),
//   q_j in 0..63. With h = j / 128, r = j % 128, g = r / 32, l = r % 32:
//   byte = ql[64 * h + l + 32 * (g & 1)],   low4 = g < 2 ? byte & 0xF : byte >> 4
//          (g = 0: ql[64h + l] low, 1: ql[64h + l + 32] low, 2: ql[64h + l] high, 3: ql[64h + l + 32] high),
//   high2 = (qh[32 * h + l] >> (2 * g)) & 3,   q_j = low4 | high2 << 4.
struct LITHE_PACKED BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // bits 0-3 of the quants, layout above
  uint8_t qh[kQK_K / 4];      // bits 4-5 of the quants, layout above
  int8_t scales[kQK_K / 16];  // signed 8-bit scale of each sub-block of 16
  uint16_t d;                 // f16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210);

// q8_k: value j = d * qs[j]. Only used for intermediate activations (dot products with k-quants).
struct LITHE_PACKED BlockQ8_K {
  float d;                     // f32 scale (not f16)
  int8_t qs[kQK_K];            // value j's quant
  int16_t bsums[kQK_K / 16];   // bsums[b] = sum of qs[16 b .. 16 b + 15] (ignored when dequantizing)
};
static_assert(sizeof(BlockQ8_K) == 292);

// ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) from the 12 packed
// scale bytes of a q4_k / q5_k block.
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace lithe::ggml
