// Scalar reference (de)quantizers for the plain types and the ggml block types.
//
// Dequantizers are bit-exact with ggml's reference `dequantize_row_*` (ggml-quants.c): every output
// is computed with the same f32 operations in the same order (e.g. q4_k: (d * sc) * q - (dmin * m)),
// so they must not be contracted into FMAs; the project compiles with -std=c++20 (no GNU
// extensions), under which GCC defaults to -ffp-contract=off.
//
// Quantizers are simple round-to-nearest encoders in ggml's format (not ggml's bit-for-bit
// output, no importance weighting):
//   legacy types   one scale (and min) per block of 32 from the block's range; the quants are
//                  rounded against the f16-rounded scale that is actually stored;
//   k-quants       each sub-block's ideal scale (and min) from its range, the super-block scale(s)
//                  chosen so the largest sub-block scale maps to the top integer code; each
//                  sub-block then takes the floor or ceiling of its integer scale (and min),
//                  whichever gives the smaller squared error after rounding its quants.
// Layouts: ggml_blocks.h.
#include "lithe/kernels/ggml_quants.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/ref/ggml_blocks.h"
#include "lithe/core/half.h"

namespace lithe::ref {
namespace {

using namespace lithe::ggml;

// ---------------------------------------------------------------------------------------------
// helpers

inline float f16(uint16_t h) { return f16_to_f32(h); }

template <typename T>
inline T load(const void* p, int64_t i) {  // element i of an array at a possibly unaligned address
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// round(v) clamped to [lo, hi]; NaN gives lo. Never converts an out-of-range float to int.
inline int round_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::nearbyint(v));
}
// floor(v) clamped to [lo, hi]; NaN gives lo.
inline int floor_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::floor(v));
}

// ---------------------------------------------------------------------------------------------
// dequantizers: dst[0 .. nb * block_elems) from nb blocks (or nb plain values)

void deq_f32(const void* src, float* y, int64_t nb) { std::memcpy(y, src, static_cast<size_t>(nb) * 4); }
void deq_f16(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) y[i] = f16_to_f32(load<uint16_t>(src, i));
}
void deq_bf16(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) y[i] = bf16_to_f32(load<uint16_t>(src, i));
}
template <typename T>
void deq_cast(const void* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) y[i] = static_cast<float>(load<T>(src, i));
}

void deq_q4_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0xF) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

void deq_q4_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    const float m = f16(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      const int x0 = x[i].qs[j] & 0xF;
      const int x1 = x[i].qs[j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kQK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void deq_q5_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    const uint32_t qh = load<uint32_t>(x[i].qh, 0);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      const int x0 = ((x[i].qs[j] & 0xF) | h0) - 16;
      const int x1 = ((x[i].qs[j] >> 4) | h1) - 16;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQK / 2] = static_cast<float>(x1) * d;
    }
  }
}

void deq_q5_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    const float m = f16(x[i].m);
    const uint32_t qh = load<uint32_t>(x[i].qh, 0);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      const int x0 = (x[i].qs[j] & 0xF) | h0;
      const int x1 = (x[i].qs[j] >> 4) | h1;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kQK / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void deq_q8_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void deq_q8_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void deq_q2_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16(x[i].d);
    const float dmin = f16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int g = 0; g < 4; ++g) {
        const int shift = 2 * g;
        for (int part = 0; part < 2; ++part) {  // two sub-blocks of 16 share the 32 bytes
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l)
            *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Unpacks q3_k's sixteen 6-bit scales (still biased by 32).
std::array<int, 16> q3_k_scales(const uint8_t* s) {
  std::array<int, 16> out{};
  for (int b = 0; b < 16; ++b) {
    const int low = b < 8 ? (s[b] & 0xF) : (s[b - 8] >> 4);
    const int high = (s[8 + b % 4] >> (2 * (b / 4))) & 3;
    out[static_cast<size_t>(b)] = low | high << 4;
  }
  return out;
}

void deq_q3_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d_all = f16(x[i].d);
    const std::array<int, 16> sc = q3_k_scales(x[i].scales);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    size_t is = 0;
    int mask_bit = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int g = 0; g < 4; ++g, ++mask_bit) {
        const int shift = 2 * g;
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(sc[is++] - 32);
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - (((hm[l] >> mask_bit) & 1) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}


void deq_q4_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16(x[i].d);
    const float dmin = f16(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      int sc = 0, m = 0;
      scale_min_k4(2 * c, x[i].scales, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      scale_min_k4(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void deq_q5_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16(x[i].d);
    const float dmin = f16(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      int sc = 0, m = 0;
      scale_min_k4(2 * c, x[i].scales, sc, m);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(m);
      scale_min_k4(2 * c + 1, x[i].scales, sc, m);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(m);
      const int b1 = 2 * c, b2 = 2 * c + 1;  // qh bit of the low / high nibble's values
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) | ((qh[l] >> b1) & 1) << 4) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) | ((qh[l] >> b2) & 1) << 4) - m2;
    }
  }
}

void deq_q6_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void deq_q8_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = x[i].d;
    for (int j = 0; j < kQK_K; ++j) y[j] = d * static_cast<float>(x[i].qs[j]);
  }
}

// ---------------------------------------------------------------------------------------------
// quantizers: nb blocks (or nb plain values) from x[0 .. nb * block_elems)

void q_f32(const float* x, void* dst, int64_t nb) { std::memcpy(dst, x, static_cast<size_t>(nb) * 4); }
void q_f64(const float* x, void* dst, int64_t nb) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const double v = x[i];
    std::memcpy(out + 8 * i, &v, 8);
  }
}
void q_f16(const float* x, void* dst, int64_t nb) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const uint16_t h = f32_to_f16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
void q_bf16(const float* x, void* dst, int64_t nb) {
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

// The value of largest magnitude (keeping its sign) among x[0..n); the first one on ties.
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, v = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      v = x[j];
    }
  }
  return v;
}

// The f16 nearest to v, moved one step away from zero when rounding shrank it, so that a scale
// stored as f16 still covers the range it was computed for (the largest value needs no code beyond
// the top one); clamped to the largest finite f16.
uint16_t f16_cover(float v) {
  uint16_t h = f32_to_f16(v);
  if (!std::isfinite(v)) return h;
  if (std::fabs(f16(h)) < std::fabs(v) && (h & 0x7fffu) < 0x7bffu) ++h;
  if ((h & 0x7c00u) == 0x7c00u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7bffu);
  return h;
}

// Stores scale d as f16 and returns the stored value and the inverse used to round the quants.
inline float store_scale(float d, uint16_t& field, float& inv) {
  field = f16_cover(d);
  const float dr = f16(field);
  inv = dr != 0.0f && std::isfinite(dr) ? 1.0f / dr : 0.0f;
  return dr;
}

// Symmetric legacy block: q in [0, 2 * half) with value (q - half) * d; the value of largest
// magnitude maps to code 0 (-half), using the full asymmetric range like ggml.
template <int kHalf>
void quant_sym_block(const float* x, uint16_t& d_field, int* q) {
  const float mx = signed_absmax(x, kQK);
  float id = 0.0f;
  store_scale(mx / -static_cast<float>(kHalf), d_field, id);
  for (int j = 0; j < kQK; ++j) q[j] = round_clamp(x[j] * id + static_cast<float>(kHalf), 0, 2 * kHalf - 1);
}

// Asymmetric legacy block: q in [0, qmax] with value q * d + m, m the block minimum.
template <int kQmax>
void quant_asym_block(const float* x, uint16_t& d_field, uint16_t& m_field, int* q) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < kQK; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  float id = 0.0f;
  store_scale((hi - lo) / static_cast<float>(kQmax), d_field, id);
  m_field = f32_to_f16(lo);
  const float m = f16(m_field);
  for (int j = 0; j < kQK; ++j) q[j] = round_clamp((x[j] - m) * id, 0, kQmax);
}

void pack_nibbles(const int* q, uint8_t* qs) {  // q[j] low nibble of byte j, q[j+16] the high one
  for (int j = 0; j < kQK / 2; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0xF) | (q[j + kQK / 2] & 0xF) << 4);
}
void pack_high_bits(const int* q, uint8_t* qh) {  // bit 4 of q[j] -> bit j of a little-endian u32
  uint32_t h = 0;
  for (int j = 0; j < kQK; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

void q_q4_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0;
    quant_sym_block<8>(x, d, q);
    y[i].d = d;
    pack_nibbles(q, y[i].qs);
  }
}

void q_q4_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0, m = 0;
    quant_asym_block<15>(x, d, m, q);
    y[i].d = d;
    y[i].m = m;
    pack_nibbles(q, y[i].qs);
  }
}

void q_q5_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0;
    quant_sym_block<16>(x, d, q);
    y[i].d = d;
    pack_high_bits(q, y[i].qh);
    pack_nibbles(q, y[i].qs);
  }
}

void q_q5_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0, m = 0;
    quant_asym_block<31>(x, d, m, q);
    y[i].d = d;
    y[i].m = m;
    pack_high_bits(q, y[i].qh);
    pack_nibbles(q, y[i].qs);
  }
}

// 8-bit symmetric: q in [-127, 127], d = absmax / 127. Returns the sum of the quants.
int quant_8bit(const float* x, int n, float d, int8_t* qs) {
  const float id = d != 0.0f && std::isfinite(d) ? 1.0f / d : 0.0f;
  int sum = 0;
  for (int j = 0; j < n; ++j) {
    const int v = round_clamp(x[j] * id, -127, 127);
    qs[j] = static_cast<int8_t>(v);
    sum += v;
  }
  return sum;
}

float absmax(const float* x, int n) {
  float a = 0.0f;
  for (int j = 0; j < n; ++j) a = std::max(a, std::fabs(x[j]));
  return a;
}

void q_q8_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0;
    float id = 0.0f;
    const float dr = store_scale(absmax(x, kQK) / 127.0f, d, id);
    y[i].d = d;
    quant_8bit(x, kQK, dr, y[i].qs);
  }
}

void q_q8_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    uint16_t d = 0;
    float id = 0.0f;
    const float dr = store_scale(absmax(x, kQK) / 127.0f, d, id);
    y[i].d = d;
    const int sum = quant_8bit(x, kQK, dr, y[i].qs);
    y[i].s = f32_to_f16(static_cast<float>(sum) * dr);
  }
}

void q_q8_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    const float d = absmax(x, kQK_K) / 127.0f;
    y[i].d = d;
    quant_8bit(x, kQK_K, d, y[i].qs);
    for (int b = 0; b < kQK_K / 16; ++b) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += y[i].qs[16 * b + l];
      y[i].bsums[b] = static_cast<int16_t>(s);
    }
  }
}

// ---- k-quants ----

// Asymmetric k-quant super-block (q2_k, q4_k, q5_k): kSub sub-blocks of kLen values, value =
// (d * sc_b) * q - (dmin * m_b) with q in [0, kQmax], sc_b and m_b in [0, kSmax].
// Outputs the f16 fields, the integer scales/mins and the quants (kSub * kLen of them).
template <int kSub, int kLen, int kQmax, int kSmax>
void quant_asym_k(const float* x, uint16_t& d_field, uint16_t& dmin_field, int* sc, int* mn, int* q) {
  float scale[kSub], minv[kSub];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int b = 0; b < kSub; ++b) {
    const float* xb = x + b * kLen;
    float lo = 0.0f, hi = xb[0];  // lo <= 0: the format subtracts a non-negative min
    for (int l = 0; l < kLen; ++l) {
      lo = std::min(lo, xb[l]);
      hi = std::max(hi, xb[l]);
    }
    scale[b] = std::max(0.0f, (hi - lo) / static_cast<float>(kQmax));
    minv[b] = -lo;
    max_scale = std::max(max_scale, scale[b]);
    max_min = std::max(max_min, minv[b]);
  }
  d_field = f16_cover(max_scale / static_cast<float>(kSmax));
  dmin_field = f16_cover(max_min / static_cast<float>(kSmax));
  const float d = f16(d_field);
  const float dmin = f16(dmin_field);
  const float inv_d = d > 0.0f && std::isfinite(d) ? 1.0f / d : 0.0f;
  const float inv_dmin = dmin > 0.0f && std::isfinite(dmin) ? 1.0f / dmin : 0.0f;

  for (int b = 0; b < kSub; ++b) {
    const float* xb = x + b * kLen;
    const int s0 = floor_clamp(scale[b] * inv_d, 0, kSmax);
    const int m0 = floor_clamp(minv[b] * inv_dmin, 0, kSmax);
    float best_err = INFINITY;
    int best_s = s0, best_m = m0;
    int qb[kLen], best_q[kLen] = {};
    for (int s = s0; s <= std::min(s0 + 1, kSmax); ++s) {
      for (int m = m0; m <= std::min(m0 + 1, kSmax); ++m) {
        const float ds = d * static_cast<float>(s);
        const float dm = dmin * static_cast<float>(m);
        const float ids = ds > 0.0f && std::isfinite(ds) ? 1.0f / ds : 0.0f;
        float err = 0.0f;
        for (int l = 0; l < kLen; ++l) {
          qb[l] = round_clamp((xb[l] + dm) * ids, 0, kQmax);
          const float e = ds * static_cast<float>(qb[l]) - dm - xb[l];
          err += e * e;
        }
        if ((s == s0 && m == m0) || err < best_err) {  // the first candidate always counts
          best_err = err;
          best_s = s;
          best_m = m;
          std::copy(qb, qb + kLen, best_q);
        }
      }
    }
    sc[b] = best_s;
    mn[b] = best_m;
    std::copy(best_q, best_q + kLen, q + b * kLen);
  }
}

// Symmetric k-quant super-block (q3_k, q6_k): kSub sub-blocks of kLen values, value =
// (d * sc_b) * q with q in [kQlo, kQhi] and sc_b in [kSlo, kShi] (both ranges one longer on the
// negative side: the largest magnitude maps to the most negative code, like q4_0).
template <int kSub, int kLen, int kQlo, int kQhi, int kSlo, int kShi>
void quant_sym_k(const float* x, uint16_t& d_field, int* sc, int* q) {
  float scale[kSub];
  for (int b = 0; b < kSub; ++b) scale[b] = signed_absmax(x + b * kLen, kLen) / static_cast<float>(kQlo);
  const float ms = signed_absmax(scale, kSub);
  d_field = f16_cover(ms / static_cast<float>(kSlo));
  const float d = f16(d_field);
  const float inv_d = d != 0.0f && std::isfinite(d) ? 1.0f / d : 0.0f;

  for (int b = 0; b < kSub; ++b) {
    const float* xb = x + b * kLen;
    const int s0 = floor_clamp(scale[b] * inv_d, kSlo, kShi);
    float best_err = INFINITY;
    int best_s = s0;
    int qb[kLen], best_q[kLen] = {};
    for (int s = s0; s <= std::min(s0 + 1, kShi); ++s) {
      const float ds = d * static_cast<float>(s);
      const float ids = ds != 0.0f && std::isfinite(ds) ? 1.0f / ds : 0.0f;
      float err = 0.0f;
      for (int l = 0; l < kLen; ++l) {
        qb[l] = round_clamp(xb[l] * ids, kQlo, kQhi);
        const float e = ds * static_cast<float>(qb[l]) - xb[l];
        err += e * e;
      }
      if (s == s0 || err < best_err) {
        best_err = err;
        best_s = s;
        std::copy(qb, qb + kLen, best_q);
      }
    }
    sc[b] = best_s;
    std::copy(best_q, best_q + kLen, q + b * kLen);
  }
}

void q_q2_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  int sc[16], mn[16], q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ2_K blk{};
    uint16_t d = 0, dmin = 0;
    quant_asym_k<16, 16, 3, 15>(x, d, dmin, sc, mn, q);
    blk.d = d;
    blk.dmin = dmin;
    for (int b = 0; b < 16; ++b) blk.scales[b] = static_cast<uint8_t>(sc[b] | mn[b] << 4);
    for (int j = 0; j < kQK_K; ++j) {
      const int h = j / 128, r = j % 128;
      blk.qs[32 * h + r % 32] |= static_cast<uint8_t>(q[j] << (2 * (r / 32)));
    }
    std::memcpy(&y[i], &blk, sizeof blk);
  }
}

void q_q3_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  int sc[16], q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ3_K blk{};
    uint16_t d = 0;
    quant_sym_k<16, 16, -4, 3, -32, 31>(x, d, sc, q);
    blk.d = d;
    for (int b = 0; b < 16; ++b) {
      const int s = sc[b] + 32;  // 0..63
      if (b < 8) {
        blk.scales[b] |= static_cast<uint8_t>(s & 0xF);
      } else {
        blk.scales[b - 8] |= static_cast<uint8_t>((s & 0xF) << 4);
      }
      blk.scales[8 + b % 4] |= static_cast<uint8_t>((s >> 4) << (2 * (b / 4)));
    }
    for (int j = 0; j < kQK_K; ++j) {
      const int u = q[j] + 4;  // 0..7
      const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
      blk.qs[32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * g));
      if (u & 4) blk.hmask[l] |= static_cast<uint8_t>(1 << (4 * h + g));
    }
    std::memcpy(&y[i], &blk, sizeof blk);
  }
}

// Inverse of scale_min_k4: eight 6-bit scales and mins into 12 bytes.
void pack_scale_min_k4(const int* sc, const int* mn, uint8_t* s) {
  std::memset(s, 0, kScaleBytesK);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] & 63);
    s[j + 4] = static_cast<uint8_t>(mn[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
    s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    s[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
  }
}

void q_q4_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  int sc[8], mn[8], q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ4_K blk{};
    uint16_t d = 0, dmin = 0;
    quant_asym_k<8, 32, 15, 63>(x, d, dmin, sc, mn, q);
    blk.d = d;
    blk.dmin = dmin;
    pack_scale_min_k4(sc, mn, blk.scales);
    for (int j = 0; j < kQK_K; ++j) {
      const int c = j / 64, r = j % 64;
      blk.qs[32 * c + r % 32] |= static_cast<uint8_t>(q[j] << (r < 32 ? 0 : 4));
    }
    std::memcpy(&y[i], &blk, sizeof blk);
  }
}

void q_q5_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  int sc[8], mn[8], q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ5_K blk{};
    uint16_t d = 0, dmin = 0;
    quant_asym_k<8, 32, 31, 63>(x, d, dmin, sc, mn, q);
    blk.d = d;
    blk.dmin = dmin;
    pack_scale_min_k4(sc, mn, blk.scales);
    for (int j = 0; j < kQK_K; ++j) {
      const int c = j / 64, r = j % 64;
      blk.qs[32 * c + r % 32] |= static_cast<uint8_t>((q[j] & 0xF) << (r < 32 ? 0 : 4));
      blk.qh[r % 32] |= static_cast<uint8_t>(((q[j] >> 4) & 1) << (2 * c + r / 32));
    }
    std::memcpy(&y[i], &blk, sizeof blk);
  }
}

void q_q6_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  int sc[16], q[kQK_K];
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ6_K blk{};
    uint16_t d = 0;
    quant_sym_k<16, 16, -32, 31, -128, 127>(x, d, sc, q);
    blk.d = d;
    for (int b = 0; b < 16; ++b) blk.scales[b] = static_cast<int8_t>(sc[b]);
    for (int j = 0; j < kQK_K; ++j) {
      const int u = q[j] + 32;  // 0..63
      const int h = j / 128, r = j % 128, g = r / 32, l = r % 32;
      blk.ql[64 * h + l + 32 * (g & 1)] |= static_cast<uint8_t>((u & 0xF) << (g < 2 ? 0 : 4));
      blk.qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * g));
    }
    std::memcpy(&y[i], &blk, sizeof blk);
  }
}

// ---------------------------------------------------------------------------------------------
// dispatch table, indexed by DType

using DequantFn = void (*)(const void*, float*, int64_t);
using QuantFn = void (*)(const float*, void*, int64_t);
struct Entry {
  DequantFn to_float = nullptr;
  QuantFn from_float = nullptr;
};

constexpr std::array<Entry, kNumDTypes> make_table() {
  std::array<Entry, kNumDTypes> t{};
  auto set = [&t](DType d, DequantFn f, QuantFn g) { t[static_cast<size_t>(d)] = {f, g}; };
  set(DType::f32, deq_f32, q_f32);
  set(DType::f16, deq_f16, q_f16);
  set(DType::bf16, deq_bf16, q_bf16);
  set(DType::f64, deq_cast<double>, q_f64);
  set(DType::i8, deq_cast<int8_t>, nullptr);
  set(DType::i16, deq_cast<int16_t>, nullptr);
  set(DType::i32, deq_cast<int32_t>, nullptr);
  set(DType::q4_0, deq_q4_0, q_q4_0);
  set(DType::q4_1, deq_q4_1, q_q4_1);
  set(DType::q5_0, deq_q5_0, q_q5_0);
  set(DType::q5_1, deq_q5_1, q_q5_1);
  set(DType::q8_0, deq_q8_0, q_q8_0);
  set(DType::q8_1, deq_q8_1, q_q8_1);
  set(DType::q2_k, deq_q2_k, q_q2_k);
  set(DType::q3_k, deq_q3_k, q_q3_k);
  set(DType::q4_k, deq_q4_k, q_q4_k);
  set(DType::q5_k, deq_q5_k, q_q5_k);
  set(DType::q6_k, deq_q6_k, q_q6_k);
  set(DType::q8_k, deq_q8_k, q_q8_k);
  return t;
}
constexpr std::array<Entry, kNumDTypes> kTable = make_table();

const Entry* entry(DType t) {
  const auto i = static_cast<size_t>(t);
  return i < kTable.size() ? &kTable[i] : nullptr;
}

std::string supported_list(bool quant) {
  std::string s;
  for (int i = 0; i < kNumDTypes; ++i) {
    const Entry& e = kTable[static_cast<size_t>(i)];
    if (quant ? e.from_float == nullptr : e.to_float == nullptr) continue;
    if (!s.empty()) s += ' ';
    s += dtype_name(static_cast<DType>(i));
  }
  return s;
}

// Validates the arguments shared by both directions; returns the number of blocks.
Result<int64_t> check_row(const char* op, DType t, bool quant, const void* src, const void* dst, int64_t n) {
  const Entry* e = entry(t);
  if (e == nullptr)
    return error(StatusCode::invalid_argument, "{}: unknown dtype value {}", op, static_cast<int>(t));
  if (quant ? e->from_float == nullptr : e->to_float == nullptr)
    return error(StatusCode::unsupported, "{}: dtype {} is not supported (n = {}); supported: {}", op,
                 dtype_name(t), n, supported_list(quant));
  const int64_t be = dtype_traits(t).block_elems;
  if (n < 0 || n % be != 0)
    return error(StatusCode::invalid_argument,
                 "{}: a row of n = {} {} elements is not a multiple of the {} block size {}", op, n,
                 dtype_name(t), dtype_name(t), be);
  if (n > 0 && (src == nullptr || dst == nullptr))
    return error(StatusCode::invalid_argument, "{}: null {} pointer for a row of {} {} elements", op,
                 src == nullptr ? "source" : "destination", n, dtype_name(t));
  return n / be;
}

}  // namespace

bool can_dequantize(DType t) {
  const Entry* e = entry(t);
  return e != nullptr && e->to_float != nullptr;
}

bool can_quantize(DType t) {
  const Entry* e = entry(t);
  return e != nullptr && e->from_float != nullptr;
}

Status dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  LITHE_ASSIGN(const int64_t nb, check_row("dequantize_row", t, false, src, dst, n));
  if (nb > 0) entry(t)->to_float(src, dst, nb);
  return Status::ok();
}

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  LITHE_ASSIGN(const int64_t nb, check_row("quantize_row", t, true, src, dst, n));
  if (nb > 0) entry(t)->from_float(src, dst, nb);
  return Status::ok();
}

}  // namespace lithe::ref
