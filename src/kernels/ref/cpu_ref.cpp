// Scalar reference of the CPU linear and attention kernels: plain loops, single thread, the oracle
// for the SIMD kernels (kernels/cpu) and the body of the scalar fallback.
//
// Quantized linear, per weight block, with the activation quantized as in cpu.h (8-bit, one f32
// scale d_x per activation block; integer sums exact):
//   q4_0  (32)  sum += (d_w d_x) * S(q - 8)·qx
//   q4_1  (32)  sum += (d_w d_x) * S(q·qx) + m_w * (d_x * S(qx))
//   q8_0  (32)  sum += (d_w d_x) * S(q·qx)
//   q4_k  (256) for each sub-block g of 32: sum += (d sc_g d_x) * S_g(q·qx) - (dmin m_g) * (d_x * S_g(qx))
//   q6_k  (256) for each sub-block g of 16: sum += (d sc_g d_x) * S_g((q - 32)·qx)
// which is the arithmetic of llama.cpp's vec_dot family (an f32 per-block scale for activations
// where llama.cpp keeps f16 for q8_0/q8_1; symmetric [-127, 127] quants for the k-quants).
#include "kernels/ref/cpu_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/ref/ggml_blocks.h"
#include "lithe/core/half.h"

namespace lithe::cpu {
namespace ref_detail {

using detail::WKind;
using namespace lithe::ggml;

namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// round-to-nearest-even of v clamped to [-127, 127]; NaN gives -127 (what the SIMD code does).
inline int8_t quant(float v) {
  if (!(v > -127.0f)) return -127;
  if (v >= 127.0f) return 127;
  return static_cast<int8_t>(std::nearbyint(v));
}

// Scale of a block with largest magnitude amax, and its inverse (0 for an all-zero or non-finite block).
inline void block_scale(float amax, float& d, float& id) {
  d = amax / 127.0f;
  id = (d != 0.0f && std::isfinite(d)) ? 1.0f / d : 0.0f;
}

// Scale of activation block b (the row's scales may sit at any address).
inline float ld(const uint8_t* dx, int64_t b) {
  float v;
  std::memcpy(&v, dx + 4 * b, 4);
  return v;
}


float dot_q4_0(const uint8_t* w, const uint8_t* dx, const int8_t* qx, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b, w += sizeof(BlockQ4_0), qx += kQK) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(w);
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((blk->qs[j] & 0xF) - 8) * qx[j];
      isum += ((blk->qs[j] >> 4) - 8) * qx[j + kQK / 2];
    }
    sum += (f16(w) * ld(dx, b)) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_1(const uint8_t* w, const uint8_t* dx, const int8_t* qx, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b, w += sizeof(BlockQ4_1), qx += kQK) {
    const auto* blk = reinterpret_cast<const BlockQ4_1*>(w);
    int isum = 0, xsum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (blk->qs[j] & 0xF) * qx[j] + (blk->qs[j] >> 4) * qx[j + kQK / 2];
      xsum += qx[j] + qx[j + kQK / 2];
    }
    sum += (f16(w) * ld(dx, b)) * static_cast<float>(isum) + f16(w + 2) * (ld(dx, b) * static_cast<float>(xsum));
  }
  return sum;
}

float dot_q8_0(const uint8_t* w, const uint8_t* dx, const int8_t* qx, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b, w += sizeof(BlockQ8_0), qx += kQK) {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(w);
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += blk->qs[j] * qx[j];
    sum += (f16(w) * ld(dx, b)) * static_cast<float>(isum);
  }
  return sum;
}

float dot_q4_k(const uint8_t* w, const uint8_t* dx, const int8_t* qx, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b, w += sizeof(BlockQ4_K)) {
    const auto* blk = reinterpret_cast<const BlockQ4_K*>(w);
    const float d = f16(w), dmin = f16(w + 2);
    for (int g = 0; g < 8; ++g, qx += 32) {
      int sc = 0, m = 0;
      scale_min_k4(g, blk->scales, sc, m);
      const uint8_t* q = blk->qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      int isum = 0, xsum = 0;
      for (int l = 0; l < 32; ++l) {
        isum += ((q[l] >> shift) & 0xF) * qx[l];
        xsum += qx[l];
      }
      sum += (d * static_cast<float>(sc) * ld(dx, b)) * static_cast<float>(isum) -
             (dmin * static_cast<float>(m)) * (ld(dx, b) * static_cast<float>(xsum));
    }
  }
  return sum;
}

float dot_q6_k(const uint8_t* w, const uint8_t* dx, const int8_t* qx, int64_t n) {
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK_K; ++b, w += sizeof(BlockQ6_K)) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(w);
    const float d = f16(reinterpret_cast<const uint8_t*>(&blk->d));
    for (int g = 0; g < 16; ++g, qx += 16) {
      int isum = 0;
      for (int l = 0; l < 16; ++l) {
        const int j = 16 * g + l;  // value index in the super-block (layout in ggml_blocks.h)
        const int h = j / 128, r = j % 128, gi = r / 32, li = r % 32;
        const uint8_t byte = blk->ql[64 * h + li + 32 * (gi & 1)];
        const int low4 = gi < 2 ? (byte & 0xF) : (byte >> 4);
        const int high2 = (blk->qh[32 * h + li] >> (2 * gi)) & 3;
        isum += ((low4 | high2 << 4) - 32) * qx[l];
      }
      sum += (d * static_cast<float>(blk->scales[g]) * ld(dx, b)) * static_cast<float>(isum);
    }
  }
  return sum;
}

}  // namespace

Result<WKind> linear_kind(DType t) {
  switch (t) {
    case DType::f32: return WKind::f32;
    case DType::f16: return WKind::f16;
    case DType::bf16: return WKind::bf16;
    case DType::q4_0: return WKind::q4_0;
    case DType::q4_1: return WKind::q4_1;
    case DType::q8_0: return WKind::q8_0;
    case DType::q4_k: return WKind::q4_k;
    case DType::q6_k: return WKind::q6_k;
    default:
      return error(StatusCode::unsupported,
                   "cpu linear: weight dtype {} is not supported (f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q6_k); "
                   "convert the weight or dequantize it",
                   t);
  }
}

Status check_linear(const Tensor& w, const float* x, int64_t m, const float* y, WKind& kind) {
  if (!w.defined()) return error(StatusCode::invalid_argument, "cpu linear: the weight tensor is empty");
  LITHE_ASSIGN(kind, linear_kind(w.dtype()));
  if (w.device() != Device::cpu)
    return error(StatusCode::invalid_argument, "cpu linear: weight {} is not in host memory", w.describe());
  if (w.ndim() != 2)
    return error(StatusCode::invalid_argument, "cpu linear: weight {} must be 2-D [n_out, n_in]", w.describe());
  if (!w.is_contiguous())
    return error(StatusCode::invalid_argument, "cpu linear: weight {} must be contiguous", w.describe());
  const int64_t n_in = w.dim(1), blk = dtype_traits(w.dtype()).block_elems;
  if (n_in <= 0 || w.dim(0) <= 0 || n_in % blk != 0)
    return error(StatusCode::invalid_argument, "cpu linear: weight {} has n_in {} (must be a positive multiple of {})",
                 w.describe(), n_in, blk);
  if (m < 0) return error(StatusCode::invalid_argument, "cpu linear: m = {} must be >= 0", m);
  if (m > 0 && (x == nullptr || y == nullptr))
    return error(StatusCode::invalid_argument, "cpu linear: null {} pointer for m = {}", x == nullptr ? "x" : "y", m);
  return Status::ok();
}

Status check_attention(const AttentionArgs& a) {
  if (a.kv_dtype != DType::f32 && a.kv_dtype != DType::f16)
    return error(StatusCode::unsupported, "cpu attention: KV dtype {} is not supported (f32, f16)", a.kv_dtype);
  if (a.n_heads <= 0 || a.n_kv_heads <= 0 || a.n_heads % a.n_kv_heads != 0)
    return error(StatusCode::invalid_argument,
                 "cpu attention: n_heads {} must be a positive multiple of n_kv_heads {}", a.n_heads, a.n_kv_heads);
  if (a.head_dim <= 0 || a.head_dim > 512)
    return error(StatusCode::invalid_argument, "cpu attention: head_dim {} must be in [1, 512]", a.head_dim);
  if (a.n_q < 0 || a.n_kv < 0)
    return error(StatusCode::invalid_argument, "cpu attention: n_q {} and n_kv {} must be >= 0", a.n_q, a.n_kv);
  if (a.kv_row_stride < a.n_kv_heads * a.head_dim)
    return error(StatusCode::invalid_argument,
                 "cpu attention: kv_row_stride {} is smaller than n_kv_heads * head_dim = {}", a.kv_row_stride,
                 a.n_kv_heads * a.head_dim);
  if (a.n_q > 0 && (a.q == nullptr || a.q_pos == nullptr || a.out == nullptr))
    return error(StatusCode::invalid_argument, "cpu attention: null q, q_pos or out for n_q = {}", a.n_q);
  if (a.n_kv > 0 && (a.k == nullptr || a.v == nullptr || a.kv_pos == nullptr))
    return error(StatusCode::invalid_argument, "cpu attention: null k, v or kv_pos for n_kv = {}", a.n_kv);
  return Status::ok();
}

int64_t act_block(WKind kind) {
  switch (kind) {
    case WKind::q4_0:
    case WKind::q4_1:
    case WKind::q8_0: return kQK;
    case WKind::q4_k:
    case WKind::q6_k: return kQK_K;
    default: return 0;
  }
}

int64_t act_row_bytes(WKind kind, int64_t n_in) {
  const int64_t blk = act_block(kind);
  return blk == 0 ? 0 : n_in / blk * 4 + n_in;
}

void quantize_act_row(WKind kind, const float* x, int64_t n_in, uint8_t* dst) {
  const int64_t blk = act_block(kind), nb = n_in / blk;
  auto* q = reinterpret_cast<int8_t*>(dst + 4 * nb);
  for (int64_t b = 0; b < nb; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < blk; ++j) amax = std::max(amax, std::fabs(x[b * blk + j]));
    float d = 0.0f, id = 0.0f;
    block_scale(amax, d, id);
    std::memcpy(dst + 4 * b, &d, 4);
    for (int64_t j = 0; j < blk; ++j) q[b * blk + j] = quant(x[b * blk + j] * id);
  }
}

float dot_row(WKind kind, const uint8_t* w, const uint8_t* act, const float* x, int64_t n) {
  switch (kind) {
    case WKind::f32: {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        float v;
        std::memcpy(&v, w + 4 * j, 4);
        s += v * x[j];
      }
      return s;
    }
    case WKind::f16: {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) s += f16(w + 2 * j) * x[j];
      return s;
    }
    case WKind::bf16: {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        uint16_t h;
        std::memcpy(&h, w + 2 * j, 2);
        s += bf16_to_f32(h) * x[j];
      }
      return s;
    }
    default: break;
  }
  const int64_t nb = n / act_block(kind);
  const auto* qx = reinterpret_cast<const int8_t*>(act + 4 * nb);
  switch (kind) {
    case WKind::q4_0: return dot_q4_0(w, act, qx, n);
    case WKind::q4_1: return dot_q4_1(w, act, qx, n);
    case WKind::q8_0: return dot_q8_0(w, act, qx, n);
    case WKind::q4_k: return dot_q4_k(w, act, qx, n);
    case WKind::q6_k: return dot_q6_k(w, act, qx, n);
    default: return 0.0f;
  }
}

void attention_rows(const AttentionArgs& a, int64_t h, int64_t t0, int64_t t1) {
  const int64_t D = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
  auto kv = [&](const void* base, int64_t s, int64_t i) -> float {
    const int64_t idx = a.pages.row(s) * a.kv_row_stride + g * D + i;
    if (a.kv_dtype == DType::f32) return static_cast<const float*>(base)[idx];
    return f16_to_f32(static_cast<const uint16_t*>(base)[idx]);
  };
  std::vector<float> p(static_cast<size_t>(a.n_kv));
  for (int64_t t = t0; t < t1; ++t) {
    const float* q = a.q + (t * a.n_heads + h) * D;
    float* out = a.out + (t * a.n_heads + h) * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t s = 0; s < a.n_kv; ++s) {
      if (a.kv_pos[s] > a.q_pos[t]) continue;
      float dot = 0.0f;
      for (int64_t i = 0; i < D; ++i) dot += q[i] * kv(a.k, s, i);
      p[static_cast<size_t>(s)] = dot * a.scale;
      mx = std::max(mx, p[static_cast<size_t>(s)]);
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < D; ++i) out[i] = 0.0f;
    for (int64_t s = 0; s < a.n_kv; ++s) {
      if (a.kv_pos[s] > a.q_pos[t]) continue;
      const float e = std::exp(p[static_cast<size_t>(s)] - mx);
      sum += e;
      for (int64_t i = 0; i < D; ++i) out[i] += e * kv(a.v, s, i);
    }
    if (sum > 0.0f)
      for (int64_t i = 0; i < D; ++i) out[i] /= sum;
  }
}

}  // namespace ref_detail

namespace ref {

Status linear(const Tensor& w, const float* x, int64_t m, float* y) {
  detail::WKind kind{};
  LITHE_TRY(ref_detail::check_linear(w, x, m, y, kind));
  const int64_t n_out = w.dim(0), n_in = w.dim(1);
  const auto* wb = static_cast<const uint8_t*>(w.data());
  const int64_t row_bytes = w.strides()[0];
  std::vector<uint8_t> act(static_cast<size_t>(ref_detail::act_row_bytes(kind, n_in)));
  for (int64_t c = 0; c < m; ++c) {
    const float* xr = x + c * n_in;
    if (!detail::is_float_kind(kind)) ref_detail::quantize_act_row(kind, xr, n_in, act.data());
    for (int64_t r = 0; r < n_out; ++r)
      y[c * n_out + r] = ref_detail::dot_row(kind, wb + r * row_bytes, act.data(), xr, n_in);
  }
  return Status::ok();
}

Status attention(const AttentionArgs& a) {
  LITHE_TRY(ref_detail::check_attention(a));
  for (int64_t h = 0; h < a.n_heads; ++h) ref_detail::attention_rows(a, h, 0, a.n_q);
  return Status::ok();
}

}  // namespace ref
}  // namespace lithe::cpu
