// The scalar kernel set: the reference loops of kernels/ref/cpu_ref.cpp (same activation
// quantization, natural element order) behind the kernel table, so that the entry points thread
// them like the SIMD sets. Used on CPUs without AVX2/FMA/F16C and when LITHE_ISA=scalar. Every
// output is one dot product on its own, so the results do not depend on m (batch invariance).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/cpu_ref.h"

namespace lithe::cpu::detail {
namespace {

int64_t act_row_bytes(WKind k, int64_t n_in) { return ref_detail::act_row_bytes(k, n_in); }

void quantize_acts(WKind k, const float* x, int64_t n_in, int64_t r0, int64_t r1, uint8_t* dst) {
  const int64_t rb = ref_detail::act_row_bytes(k, n_in);
  for (int64_t r = r0; r < r1; ++r) ref_detail::quantize_act_row(k, x + r * n_in, n_in, dst + r * rb);
}

int64_t linear_row_grain(WKind, int64_t, int64_t) { return 16; }
int64_t linear_scratch_bytes(WKind, int64_t, int64_t) { return 0; }

void linear_rows(const LinearJob& j, int64_t r0, int64_t r1, uint8_t*) {
  for (int64_t c = 0; c < j.m; ++c) {
    const uint8_t* act = j.xq ? j.xq + c * j.xq_row_bytes : nullptr;
    const float* x = j.x ? j.x + c * j.n_in : nullptr;
    for (int64_t r = r0; r < r1; ++r)
      j.y[c * j.n_out + r] = ref_detail::dot_row(j.kind, j.w + r * j.row_bytes, act, x, j.n_in);
  }
}

void rmsnorm_rows(const float* x, const float* w, float eps, int64_t n, int64_t r0, int64_t r1, float* y) {
  for (int64_t r = r0; r < r1; ++r) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] * scale * w[i];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float softmax_weights(float* x, int64_t n, float scale, float* sums) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  for (int64_t b0 = 0; b0 < n; b0 += kSoftmaxBlock) {
    float s = 0.0f;
    for (int64_t i = b0; i < std::min(n, b0 + kSoftmaxBlock); ++i) {
      const float d = (x[i] - mx) * scale;
      s += x[i] = d > -87.0f ? std::exp(d) : 0.0f;
    }
    sums[b0 / kSoftmaxBlock] = s;
  }
  return mx;
}

void rope_tokens(float* x, int64_t t0, int64_t t1, int64_t n_heads, int64_t head_dim, const int32_t* pos,
                 const float* inv_freq, int64_t rot_dim, int style, const float* angles) {
  const int64_t half = rot_dim / 2;
  for (int64_t t = t0; t < t1; ++t) {
    const float* row = angles != nullptr ? angles + pos[t] * rot_dim : nullptr;
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(pos[t]) * static_cast<double>(inv_freq[i]);
      const float c = row ? row[2 * i] : static_cast<float>(std::cos(ang));
      const float s = row ? row[2 * i + 1] : static_cast<float>(std::sin(ang));
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        const int64_t i0 = style == 0 ? 2 * i : i, i1 = style == 0 ? 2 * i + 1 : i + half;
        const float a = v[i0], b = v[i1];
        v[i0] = a * c - b * s;
        v[i1] = b * c + a * s;
      }
    }
  }
}

int64_t attention_scratch_floats(int64_t, int64_t) { return 0; }

void attention_items(const AttentionArgs& a, int64_t q_block, int64_t i0, int64_t i1, float*) {
  for (int64_t item = i0; item < i1; ++item) {
    int64_t head = 0, t0 = 0, t1 = 0;
    attention_item(a, q_block, item, head, t0, t1);
    ref_detail::attention_rows(a, head, t0, t1);
  }
}

// The reference loops read the GGUF blocks: no batch layout.
int64_t batch_row_bytes(WKind, int64_t) { return 0; }
void pack_weight_rows(const LinearJob&, int64_t, int64_t, uint8_t*) {}

const KernelTable kTable = {
    Isa::scalar,      act_row_bytes,    quantize_acts,  linear_row_grain,         linear_scratch_bytes,
    linear_rows,      batch_row_bytes,  pack_weight_rows, rmsnorm_rows,           silu_mul,
    add,              softmax_weights,  rope_tokens,    attention_scratch_floats, attention_items,
    gq_prepare_acts_scalar, gq_scratch_bytes_scalar, gq_linear_rows_scalar,
};

}  // namespace

const KernelTable& table_scalar() { return kTable; }

}  // namespace lithe::cpu::detail
