// Tests of the CPU row ops and attention (kernels/cpu) on every ISA available here (force_isa):
// rmsnorm, silu_mul, add_inplace and rope against their formulas in double; attention (and
// cpu::ref::attention) against a naive two-pass softmax in double, with GQA, f32 and f16 caches,
// unsorted slot positions, padded cache rows and queries that see no slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "lithe/core/half.h"
#include "lithe/kernels/cpu.h"
#include "cpu_test_util.h"

namespace lithe::cpu {
namespace {

// Each test runs every ISA twice, on the calling thread only and split over the pool (split_pass()
// tells which); KernelKnobsRestore puts both back.
using IsaRestore = KernelKnobsRestore;
std::vector<std::pair<Isa, bool>> isa_split_passes() {
  std::vector<std::pair<Isa, bool>> out;
  for (Isa i : available_isas())
    for (bool s : {false, true}) out.emplace_back(i, s);
  return out;
}
void select(const std::pair<Isa, bool>& p) {
  force_isa(p.first);
  force_split(p.second);
}

double rel_err(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& f : v) f = nd(rng);
  return v;
}

const int64_t kSizes[] = {1, 7, 16, 33, 64, 100, 576, 1000};

TEST(CpuOps, RmsNorm) {
  IsaRestore restore;
  std::mt19937 rng(1);
  for (const auto& pass : isa_split_passes()) {
    select(pass);
    const Isa isa = pass.first;
    for (int64_t n : kSizes) {
      for (int64_t m : {1, 3, 70}) {
        const auto x = randn(static_cast<size_t>(m * n), rng, 3.0f), w = randn(static_cast<size_t>(n), rng);
        std::vector<double> want(x.size());
        for (int64_t r = 0; r < m; ++r) {
          double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[r * n + i]) * x[r * n + i];
          const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
          for (int64_t i = 0; i < n; ++i) want[r * n + i] = x[r * n + i] * scale * w[i];
        }
        std::vector<float> y(x.size());
        rmsnorm(x.data(), w.data(), 1e-5f, m, n, y.data());
        EXPECT_LE(rel_err(y, want), 1e-6) << isa_name(isa) << " n=" << n << " m=" << m;
        std::vector<float> inplace = x;  // y may alias x
        rmsnorm(inplace.data(), w.data(), 1e-5f, m, n, inplace.data());
        EXPECT_EQ(inplace, y);
      }
    }
  }
}

TEST(CpuOps, SiluMulAndAdd) {
  IsaRestore restore;
  std::mt19937 rng(2);
  for (const auto& pass : isa_split_passes()) {
    select(pass);
    const Isa isa = pass.first;
    for (int64_t n : {1, 7, 16, 33, 1000, 200000}) {
      auto g = randn(static_cast<size_t>(n), rng, 4.0f);
      const auto u = randn(static_cast<size_t>(n), rng);
      if (n > 4) g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f, g[3] = -700.0f;  // saturated ends of silu
      std::vector<double> want(g.size());
      for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      std::vector<float> y = g;
      silu_mul(y.data(), u.data(), n);
      EXPECT_LE(rel_err(y, want), 1e-6) << isa_name(isa) << " n=" << n;
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 1e-6 * std::abs(want[i]) + 1e-30) << isa_name(isa) << " i=" << i << " g=" << g[i];

      std::vector<float> a = g;
      add_inplace(a.data(), u.data(), n);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], g[i] + u[i]);
    }
  }
}

TEST(CpuOps, SoftmaxWeightsAgainstExpInDouble) {
  IsaRestore restore;
  std::mt19937 rng(4);
  for (Isa isa : available_isas()) {
    force_isa(isa);
    for (int64_t n : {1, 7, 16, 255, 256, 257, 1000, 49152}) {
      for (float scale : {1.0f, 1.25f, 10.0f}) {
        auto x = randn(static_cast<size_t>(n), rng, 4.0f);
        if (n > 3) x[1] = 9.0f, x[2] = -1e30f, x[3] = -std::numeric_limits<float>::infinity();
        const float want_max = *std::max_element(x.begin(), x.end());
        std::vector<float> w = x;
        std::vector<float> sums(static_cast<size_t>((n + kSoftmaxBlock - 1) / kSoftmaxBlock), -1.0f);
        ASSERT_EQ(softmax_weights(w.data(), n, scale, sums.data()), want_max) << isa_name(isa);
        for (size_t b = 0; b < sums.size(); ++b) {
          double want_sum = 0;
          for (size_t i = b * kSoftmaxBlock; i < std::min(x.size(), (b + 1) * kSoftmaxBlock); ++i) {
            const float d = (x[i] - want_max) * scale;  // as the kernels round it
            const double want = d > -87.0f ? std::exp(static_cast<double>(d)) : 0.0;
            ASSERT_NEAR(w[i], want, 3e-7 * want)
                << isa_name(isa) << " n=" << n << " i=" << i << " x=" << x[i];
            want_sum += want;
          }
          // an f32 sum of <= 256 terms
          EXPECT_NEAR(sums[b], want_sum, 2e-5 * want_sum + 1e-37) << isa_name(isa) << " n=" << n << " block " << b;
        }
      }
    }
  }
}

RopeTable rope_table(int64_t rot_dim, double theta) {
  RopeTable t;
  t.rot_dim = rot_dim;
  for (int64_t i = 0; i < rot_dim / 2; ++i)
    t.inv_freq.push_back(static_cast<float>(1.0 / std::pow(theta, 2.0 * i / rot_dim)));
  return t;
}

TEST(CpuOps, RopeBothStylesAgainstFormula) {
  IsaRestore restore;
  std::mt19937 rng(3);
  struct Case {
    int64_t n_tokens, n_heads, head_dim, rot_dim;
  };
  for (const auto& pass : isa_split_passes()) {
    select(pass);
    const Isa isa = pass.first;
    for (const Case c : {Case{1, 9, 64, 64}, Case{5, 3, 64, 32}, Case{40, 2, 128, 128}, Case{3, 4, 80, 40},
                         Case{2, 1, 6, 6}}) {
      for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
        const RopeTable table = rope_table(c.rot_dim, 10000.0);
        std::vector<int32_t> pos(static_cast<size_t>(c.n_tokens));
        for (size_t t = 0; t < pos.size(); ++t) pos[t] = t % 2 ? static_cast<int32_t>(t) : 1'000'000 + static_cast<int32_t>(t * 977);
        const auto x = randn(static_cast<size_t>(c.n_tokens * c.n_heads * c.head_dim), rng);
        std::vector<double> want(x.begin(), x.end());
        const int64_t half = c.rot_dim / 2;
        for (int64_t t = 0; t < c.n_tokens; ++t)
          for (int64_t h = 0; h < c.n_heads; ++h)
            for (int64_t i = 0; i < half; ++i) {
              const double ang = pos[t] * static_cast<double>(table.inv_freq[i]);
              const int64_t base = (t * c.n_heads + h) * c.head_dim;
              const int64_t i0 = base + (style == RopeStyle::interleaved ? 2 * i : i);
              const int64_t i1 = base + (style == RopeStyle::interleaved ? 2 * i + 1 : i + half);
              want[i0] = x[i0] * std::cos(ang) - x[i1] * std::sin(ang);
              want[i1] = x[i1] * std::cos(ang) + x[i0] * std::sin(ang);
            }
        std::vector<float> y = x;
        rope(y.data(), c.n_tokens, c.n_heads, c.head_dim, pos.data(), table, style);
        EXPECT_LE(rel_err(y, want), 1e-6) << isa_name(isa) << " style " << static_cast<int>(style) << " tokens "
                                          << c.n_tokens << " dim " << c.head_dim << "/" << c.rot_dim;
        for (int64_t t = 0; t < c.n_tokens; ++t)  // dimensions past rot_dim untouched
          for (int64_t h = 0; h < c.n_heads; ++h)
            for (int64_t i = c.rot_dim; i < c.head_dim; ++i) {
              const size_t k = static_cast<size_t>((t * c.n_heads + h) * c.head_dim + i);
              ASSERT_EQ(y[k], x[k]);
            }
      }
    }
  }
}

// ---- attention --------------------------------------------------------------------------------

struct AttnCase {
  int64_t n_q, n_kv, n_heads, n_kv_heads, head_dim, pad;  // pad: extra floats per cache row
  DType kv_dtype;
  bool shuffle;  // slots hold positions in random order
};

struct AttnData {
  std::vector<float> q, kf, vf;     // kf/vf: the cache values as f32 (exactly representable in f16 when needed)
  std::vector<uint16_t> kh, vh;     // f16 copies
  std::vector<int32_t> q_pos, kv_pos;
  AttentionArgs args{};
};

AttnData make_attention(const AttnCase& c, std::mt19937& rng) {
  AttnData d;
  const int64_t stride = c.n_kv_heads * c.head_dim + c.pad;
  d.q = randn(static_cast<size_t>(c.n_q * c.n_heads * c.head_dim), rng);
  d.kf = randn(static_cast<size_t>(std::max<int64_t>(1, c.n_kv * stride)), rng);
  d.vf = randn(d.kf.size(), rng);
  for (auto* v : {&d.kf, &d.vf}) {
    for (auto& f : *v) f = f16_to_f32(f32_to_f16(f));
    for (auto f : *v) (v == &d.kf ? d.kh : d.vh).push_back(f32_to_f16(f));
  }
  // Cache slots hold positions 0..n_kv-1 (shuffled or not); the queries are the last n_q of them,
  // plus, when there are enough, a query placed before every slot (sees nothing).
  d.kv_pos.resize(static_cast<size_t>(c.n_kv));
  std::iota(d.kv_pos.begin(), d.kv_pos.end(), 0);
  if (c.shuffle) std::shuffle(d.kv_pos.begin(), d.kv_pos.end(), rng);
  for (int64_t t = 0; t < c.n_q; ++t) d.q_pos.push_back(static_cast<int32_t>(c.n_kv - c.n_q + t));
  if (c.n_q > 2) d.q_pos[1] = -5;
  auto& a = d.args;
  a.q = d.q.data();
  a.n_q = c.n_q;
  a.q_pos = d.q_pos.data();
  a.k = c.kv_dtype == DType::f16 ? static_cast<const void*>(d.kh.data()) : d.kf.data();
  a.v = c.kv_dtype == DType::f16 ? static_cast<const void*>(d.vh.data()) : d.vf.data();
  a.kv_dtype = c.kv_dtype;
  a.n_kv = c.n_kv;
  a.kv_pos = d.kv_pos.data();
  a.kv_row_stride = stride;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  return d;
}

// Two-pass softmax in double.
std::vector<double> naive_attention(const AttnData& d) {
  const auto& a = d.args;
  const int64_t D = a.head_dim, rep = a.n_heads / a.n_kv_heads;
  std::vector<double> out(static_cast<size_t>(a.n_q * a.n_heads * D), 0.0);
  for (int64_t t = 0; t < a.n_q; ++t)
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const int64_t g = h / rep;
      std::vector<double> s(static_cast<size_t>(a.n_kv), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < a.n_kv; ++j) {
        if (a.kv_pos[j] > a.q_pos[t]) continue;
        double dot = 0;
        for (int64_t i = 0; i < D; ++i)
          dot += static_cast<double>(a.q[(t * a.n_heads + h) * D + i]) * d.kf[j * a.kv_row_stride + g * D + i];
        s[j] = dot * a.scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < a.n_kv; ++j)
        if (std::isfinite(s[j])) sum += std::exp(s[j] - mx);
      for (int64_t j = 0; j < a.n_kv; ++j) {
        if (!std::isfinite(s[j])) continue;
        const double p = std::exp(s[j] - mx) / sum;
        for (int64_t i = 0; i < D; ++i) out[(t * a.n_heads + h) * D + i] += p * d.vf[j * a.kv_row_stride + g * D + i];
      }
    }
  return out;
}

TEST(CpuAttention, MatchesNaiveSoftmax) {
  IsaRestore restore;
  std::mt19937 rng(4);
  const AttnCase cases[] = {
      {1, 37, 9, 3, 64, 0, DType::f32, false},     // decode step, SmolLM2 heads
      {1, 300, 9, 3, 64, 0, DType::f16, true},     // decode over a shuffled f16 cache
      {17, 40, 4, 4, 40, 3, DType::f16, true},     // prefill, MHA, head_dim not a multiple of 16, padded rows
      {64, 64, 8, 2, 128, 0, DType::f32, false},   // prefill from an empty cache, 4 heads per KV head
      {33, 70, 6, 1, 24, 5, DType::f32, true},     // MQA, odd sizes
      {5, 1, 2, 1, 8, 0, DType::f16, false},       // one slot
      {3, 0, 2, 2, 16, 0, DType::f32, false},      // empty cache: zeros
  };
  for (const AttnCase& c : cases) {
    AttnData d = make_attention(c, rng);
    const auto want = naive_attention(d);
    std::vector<float> out(want.size(), std::nanf(""));
    d.args.out = out.data();
    ASSERT_TRUE(ref::attention(d.args).is_ok());
    EXPECT_LE(rel_err(out, want), 2e-6) << "ref, n_q=" << c.n_q << " n_kv=" << c.n_kv;
    for (const auto& pass : isa_split_passes()) {
      select(pass);
      const Isa isa = pass.first;
      std::fill(out.begin(), out.end(), std::nanf(""));
      ASSERT_TRUE(attention(d.args).is_ok());
      EXPECT_LE(rel_err(out, want), 1e-5) << isa_name(isa) << " n_q=" << c.n_q << " n_kv=" << c.n_kv
                                          << " D=" << c.head_dim << " " << dtype_name(c.kv_dtype);
      if (c.n_q > 2) {  // the query before every slot sees nothing: zeros
        for (int64_t i = 0; i < c.n_heads * c.head_dim; ++i) ASSERT_EQ(out[c.n_heads * c.head_dim + i], 0.0f);
      }
    }
  }
}

// Several sequences in one attention_many call (a batch of decode steps and prefill chunks, f32
// and f16 caches, an empty one): each output equals attention() of that sequence alone, bit for
// bit, on one thread or split over the pool.
TEST(CpuAttention, ManySequencesEqualEachAlone) {
  IsaRestore restore;
  std::mt19937 rng(6);
  const AttnCase cases[] = {
      {1, 37, 9, 3, 64, 0, DType::f32, false}, {1, 300, 9, 3, 64, 0, DType::f16, true},
      {17, 40, 9, 3, 64, 0, DType::f16, true}, {1, 1, 9, 3, 64, 0, DType::f32, false},
      {3, 0, 9, 3, 64, 0, DType::f32, false},  {33, 70, 9, 3, 64, 5, DType::f32, true},
  };
  std::vector<AttnData> data;
  for (const AttnCase& c : cases) data.push_back(make_attention(c, rng));
  for (const auto& pass : isa_split_passes()) {
    select(pass);
    std::vector<std::vector<float>> alone, joint;
    std::vector<AttentionArgs> args;
    for (AttnData& d : data) {
      const size_t n = static_cast<size_t>(d.args.n_q * d.args.n_heads * d.args.head_dim);
      alone.emplace_back(n, std::nanf(""));
      joint.emplace_back(n, std::nanf(""));
      d.args.out = alone.back().data();
      ASSERT_TRUE(attention(d.args).is_ok());
      args.push_back(d.args);
      args.back().out = joint.back().data();
    }
    ASSERT_TRUE(attention_many(args).is_ok());
    for (size_t i = 0; i < data.size(); ++i)
      ASSERT_EQ(0, std::memcmp(alone[i].data(), joint[i].data(), alone[i].size() * sizeof(float)))
          << isa_name(pass.first) << " split " << pass.second << " sequence " << i;
  }
}

TEST(CpuAttention, LongContextWithLargeScores) {
  // Scores of magnitude ~50: the online softmax must rescale without overflow or underflow.
  IsaRestore restore;
  std::mt19937 rng(5);
  AttnData d = make_attention({4, 2000, 2, 1, 64, 0, DType::f32, true}, rng);
  for (auto& f : d.q) f *= 8.0f;
  const auto want = naive_attention(d);
  std::vector<float> out(want.size());
  d.args.out = out.data();
  for (const auto& pass : isa_split_passes()) {
    select(pass);
    const Isa isa = pass.first;
    ASSERT_TRUE(attention(d.args).is_ok());
    EXPECT_LE(rel_err(out, want), 2e-5) << isa_name(isa);
  }
}

TEST(CpuAttention, RejectsBadArguments) {
  std::mt19937 rng(6);
  AttnData d = make_attention({2, 8, 6, 4, 16, 0, DType::f32, false}, rng);
  std::vector<float> out(2 * 6 * 16);
  d.args.out = out.data();
  Status st = attention(d.args);  // 6 heads over 4 KV heads
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("n_kv_heads 4"), std::string::npos) << st.message();
  d.args.n_kv_heads = 3;
  d.args.kv_dtype = DType::q8_0;
  st = attention(d.args);
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("q8_0"), std::string::npos) << st.message();
  d.args.kv_dtype = DType::f32;
  d.args.kv_row_stride = 10;
  st = ref::attention(d.args);
  EXPECT_NE(st.message().find("kv_row_stride 10"), std::string::npos) << st.message();
  d.args.kv_row_stride = 48;
  d.args.head_dim = 1024;
  EXPECT_FALSE(attention(d.args).is_ok());
}

}  // namespace
}  // namespace lithe::cpu
