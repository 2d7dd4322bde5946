// The scalar gq kernels (table_scalar()): the math of linear_gq.inc in plain loops over the same
// packed layout, in natural element order. Used on CPUs without AVX2 and when LITHE_ISA=scalar.
// Activation record per unit: int8 q[128] i8 | d[4] f32 (one per block of 32); int16 q[128] i16 |
// d[4] f32; natural order.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/kernel_table.h"
#include "lithe/core/half.h"

namespace lithe::cpu::detail {
namespace {

// Unit u of a code row -> codes[128] in natural order (absent values 0).
void decode_unit(const GqGeom& g, const uint8_t* row, int64_t u, uint8_t* codes) {
  const uint8_t* p = row + u * g.unit_bytes;
  const int nb = (g.tail_blocks != 0 && u == g.units - 1) ? g.tail_blocks : 4;
  uint8_t ab[2][64] = {};
  switch (g.bits) {
    case 8:
      for (int i = 0; i < 16 * nb; ++i) {
        ab[0][i] = p[i];
        ab[1][i] = p[16 * nb + i];
      }
      break;
    case 4:
      for (int i = 0; i < 16 * nb; ++i) {
        ab[0][i] = p[i] & 15;
        ab[1][i] = p[i] >> 4;
      }
      break;
    default: {  // 2, 3
      for (int b = 0; b < 32; ++b) {
        ab[0][b] = p[b] & 3;
        ab[0][32 + b] = (p[b] >> 2) & 3;
        ab[1][b] = (p[b] >> 4) & 3;
        ab[1][32 + b] = p[b] >> 6;
      }
      if (g.bits == 3) {
        for (int i = 0; i < 64; ++i) {
          ab[0][i] = static_cast<uint8_t>(ab[0][i] | ((p[32 + i / 8] >> (i % 8)) & 1) << 2);
          ab[1][i] = static_cast<uint8_t>(ab[1][i] | ((p[40 + i / 8] >> (i % 8)) & 1) << 2);
        }
      }
      break;
    }
  }
  for (int v = 0; v < kGqUnit; ++v) {
    int half = 0, i = 0;
    gq_ab_of(v, half, i);
    codes[v] = ab[half][i];
  }
}

// Quants of 32 values as the SIMD sets make them: d = absmax / L (NaNs ignored), round-to-nearest-
// even of x / d clamped to [-L, L]; L = 127 (int8) or 32767 (int16). Returns d.
template <typename Q>
float quantize_block(const float* x, Q* q) {
  constexpr float L = sizeof(Q) == 1 ? 127.0f : 32767.0f;
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / L;
  const float id = (d != 0.0f && std::isfinite(d)) ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) {
    float s = x[i] * id;
    s = s >= -L ? s : -L;  // NaN -> -L, as the SIMD max / min
    s = s <= L ? s : L;
    q[i] = static_cast<Q>(std::nearbyint(s));
  }
  return d;
}

// One block of an activation record: its quants and scale.
template <typename Q>
void quantize_into(const float* xb, uint8_t* unit_rec, int b, float& sum) {
  Q* q = reinterpret_cast<Q*>(unit_rec) + 32 * b;
  const float d = quantize_block(xb, q);
  std::memcpy(unit_rec + kGqUnit * sizeof(Q) + 4 * b, &d, 4);
  int isum = 0;
  for (int i = 0; i < 32; ++i) isum += q[i];
  sum = d * static_cast<float>(isum);
}

template <typename Q>
float dot_block(const uint8_t* act, int64_t blk, const uint8_t* codes) {
  const int64_t u = blk / 4, b = blk % 4;
  const uint8_t* rec = act + u * (sizeof(Q) == 1 ? kGqActI8UnitBytes : kGqActI16UnitBytes);
  const Q* qx = reinterpret_cast<const Q*>(rec) + 32 * b;
  float d = 0.0f;
  std::memcpy(&d, rec + kGqUnit * sizeof(Q) + 4 * b, 4);
  int isum = 0;
  for (int i = 0; i < 32; ++i) isum += codes[i] * qx[i];
  return d * static_cast<float>(isum);
}

}  // namespace

void gq_prepare_acts_scalar(const GqJob& j, const float* x, const int32_t* perm, int64_t r0, int64_t r1) {
  const GqGeom& g = j.g;
  const int64_t n_blocks = g.n_in / kGqBlock;
  float buf[kGqUnit];
  for (int64_t c = r0; c < r1; ++c) {
    const float* xr = x + c * g.n_in;
    float* xs = j.xsum + c * g.xs_stride;
    std::memset(xs, 0, static_cast<size_t>(g.xs_stride) * 4);
    uint8_t* dst = j.acts + c * j.act_row_bytes;
    for (int64_t u = 0; u < g.units; ++u) {
      for (int64_t v = 0; v < kGqUnit; ++v) {
        const int64_t col = u * kGqUnit + v;
        buf[v] = col < g.n_in ? xr[perm != nullptr ? perm[col] : col] : 0.0f;
      }
      for (int b = 0; b < 4; ++b) {
        const int64_t blk = 4 * u + b;
        const float* xb = buf + 32 * b;
        float sum = 0.0f;
        if (j.mode == GqActs::int8) {
          quantize_into<int8_t>(xb, dst + u * kGqActI8UnitBytes, b, sum);
        } else if (j.mode == GqActs::int16) {
          quantize_into<int16_t>(xb, dst + u * kGqActI16UnitBytes, b, sum);
        } else {
          std::memcpy(reinterpret_cast<float*>(dst) + u * kGqUnit + 32 * b, xb, 32 * 4);
          for (int i = 0; i < 32; ++i) sum += xb[i];
        }
        if (blk < n_blocks) xs[gq_entry_of_block(g, blk)] += sum;
      }
    }
  }
}

int64_t gq_scratch_bytes_scalar(const GqJob& j) { return j.g.units * kGqUnit; }

void gq_linear_rows_scalar(const GqJob& j, int64_t r0, int64_t r1, uint8_t* scratch) {
  const GqGeom& g = j.g;
  const int64_t n_blocks = g.n_in / kGqBlock;
  uint8_t* codes = scratch;  // the row's codes, natural order
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* w = gq_codes(j, r);
    const uint16_t* sc = gq_scales(j, r);
    const uint8_t* z = gq_zeros(j, r);
    for (int64_t u = 0; u < g.units; ++u) decode_unit(g, w, u, codes + u * kGqUnit);
    for (int64_t c = 0; c < j.m; ++c) {
      const uint8_t* act = j.acts + c * j.act_row_bytes;
      float tot = 0.0f;
      for (int64_t blk = 0; blk < n_blocks; ++blk) {
        const float s = f16_to_f32(sc[gq_entry_of_block(g, blk)]);
        const uint8_t* q = codes + blk * kGqBlock;
        if (j.mode == GqActs::int8) {
          tot += s * dot_block<int8_t>(act, blk, q);
        } else if (j.mode == GqActs::int16) {
          tot += s * dot_block<int16_t>(act, blk, q);
        } else {
          const float* xb = reinterpret_cast<const float*>(act) + blk * kGqBlock;
          float acc = 0.0f;
          for (int i = 0; i < 32; ++i) acc += static_cast<float>(q[i]) * xb[i];
          tot += s * acc;
        }
      }
      const float* xs = j.xsum + c * g.xs_stride;
      for (int64_t e = 0; e < g.n_ent; ++e) tot -= f16_to_f32(sc[e]) * static_cast<float>(z[e]) * xs[e];
      j.y[c * g.n_out + r] = tot;
    }
  }
}

}  // namespace lithe::cpu::detail
