// Unit tests for the compression solvers (src/compress): quantization grids, RTN, GPTQ,
// SparseGPT and magnitude pruning. Random matrices use fixed seeds; the "correlated" Hessian is
// H = 2XXᵀ over 2048 samples of 256 features, a few of which are strongly correlated and a few
// scaled up (the setting where second-order solvers beat RTN / magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "lithe/compress/gptq.h"
#include "lithe/compress/hessian.h"
#include "lithe/compress/quant_grid.h"
#include "lithe/compress/rtn.h"
#include "lithe/compress/sparsegpt.h"

namespace lc = lithe::compress;

namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (float& v : m) v = dist(rng);
  return m;
}

// H = 2 X Xᵀ for X [n][samples].
std::vector<double> hessian_of(const std::vector<float>& x, int64_t n, int64_t samples) {
  std::vector<double> h(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      const float* a = x.data() + i * samples;
      const float* b = x.data() + j * samples;
      for (int64_t t = 0; t < samples; ++t) s += static_cast<double>(a[t]) * b[t];
      h[static_cast<size_t>(i * n + j)] = h[static_cast<size_t>(j * n + i)] = 2.0 * s;
    }
  return h;
}

// Calibration inputs with correlated and outlier features, [n][samples].
std::vector<float> correlated_inputs(int64_t n, int64_t samples, uint32_t seed) {
  std::vector<float> x = random_matrix(n, samples, seed);
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (int64_t f = 1; f < 16; ++f)  // features 1..15 follow feature 0 (or 16..) closely
    for (int64_t t = 0; t < samples; ++t)
      x[static_cast<size_t>(f * samples + t)] = x[static_cast<size_t>((f % 2 ? 0 : 16) * samples + t)] + noise(rng);
  for (int64_t f = 32; f < n; f += 37)  // a few large-magnitude features
    for (int64_t t = 0; t < samples; ++t) x[static_cast<size_t>(f * samples + t)] *= 8.0f;
  return x;
}

struct Layer {
  int64_t n_out = 64, n_in = 256, samples = 2048;
  std::vector<float> w;
  std::vector<double> h;
};

const Layer& correlated_layer() {
  static const Layer layer = [] {
    Layer l;
    l.w = random_matrix(l.n_out, l.n_in, 7, 0.02f);
    l.h = hessian_of(correlated_inputs(l.n_in, l.samples, 11), l.n_in, l.samples);
    return l;
  }();
  return layer;
}

std::vector<double> identity(int64_t n, double v = 1.0) {
  std::vector<double> h(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) h[static_cast<size_t>(i * n + i)] = v;
  return h;
}

double recon(const Layer& l, const std::vector<float>& w_hat) {
  auto r = lc::reconstruction_error(l.w, w_hat, l.h, l.n_out, l.n_in);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? *r : 1e30;
}

}  // namespace

// ---- quantization grid -------------------------------------------------------------------

TEST(QuantGrid, AsymmetricMinMaxAsReference) {
  const std::vector<float> x = {-0.5f, 0.25f, 1.0f, 0.0f};
  lc::QuantGrid g{.bits = 4};
  const lc::GridParams p = lc::find_params(g, x.data(), 4);
  EXPECT_FLOAT_EQ(p.scale, 1.5f / 15.0f);
  EXPECT_FLOAT_EQ(p.zero, std::nearbyint(0.5f / (1.5f / 15.0f)));  // 5
  EXPECT_EQ(lc::quantize_code(1.0f, p, 15), 15);
  EXPECT_EQ(lc::quantize_code(-0.5f, p, 15), 0);
  EXPECT_EQ(lc::quantize_value(0.0f, p, 15), 0.0f);  // 0 is always on the grid
  EXPECT_EQ(lc::quantize_code(100.0f, p, 15), 15);   // clamped
}

TEST(QuantGrid, PositiveRowStillContainsZeroAndSymmetricMirrors) {
  const std::vector<float> x = {0.5f, 1.0f, 2.0f};
  lc::QuantGrid a{.bits = 3};
  lc::GridParams p = lc::find_params(a, x.data(), 3);
  EXPECT_FLOAT_EQ(p.scale, 2.0f / 7.0f);  // xmin clamps to 0
  EXPECT_EQ(p.zero, 0.0f);
  lc::QuantGrid s{.bits = 3, .sym = true};
  p = lc::find_params(s, x.data(), 3);
  EXPECT_FLOAT_EQ(p.scale, 4.0f / 7.0f);  // [-2, 2]
  EXPECT_EQ(p.zero, 4.0f);
  EXPECT_EQ(lc::quantize_code(2.0f, p, 7), 7);  // round(3.5) + 4 = 8 clamps to maxq
  EXPECT_EQ(lc::quantize_code(-2.2f, p, 7), 0);
}

TEST(QuantGrid, AllZeroRowUsesUnitRange) {
  const std::vector<float> x(8, 0.0f);
  for (bool sym : {false, true}) {
    lc::QuantGrid g{.bits = 4, .sym = sym};
    const lc::GridParams p = lc::find_params(g, x.data(), 8);
    EXPECT_FLOAT_EQ(p.scale, 2.0f / 15.0f);
    EXPECT_EQ(lc::quantize_value(0.0f, p, 15), 0.0f);
  }
}

TEST(QuantGrid, ClippingSearchNeverWorseInNorm) {
  std::vector<float> x = random_matrix(1, 128, 3);
  x[5] = 12.0f;  // an outlier makes clipping pay off
  lc::QuantGrid plain{.bits = 3};
  lc::QuantGrid mse{.bits = 3, .mse = true};
  auto norm_err = [&](const lc::GridParams& p) {
    double e = 0;
    for (float v : x) e += std::pow(std::fabs(lc::quantize_value(v, p, 7) - v), 2.4);
    return e;
  };
  const double e0 = norm_err(lc::find_params(plain, x.data(), 128));
  const double e1 = norm_err(lc::find_params(mse, x.data(), 128));
  EXPECT_LT(e1, e0);
}

TEST(QuantGrid, ValidateNamesBadValues) {
  lc::QuantGrid g{.bits = 4, .group = 48};
  const lithe::Status s = g.validate(256);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("48"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("256"), std::string::npos) << s.message();
  lc::QuantGrid b{.bits = 5};
  EXPECT_NE(b.validate(256).message().find("5"), std::string::npos);
  EXPECT_TRUE((lc::QuantGrid{.bits = 2, .group = 32}.validate(256).is_ok()));
  // A non-dividing group names the nearest divisors and the opt-in flag; partial_groups accepts it.
  const lithe::Status nd = lc::QuantGrid{.bits = 4, .group = 128}.validate(576);
  ASSERT_FALSE(nd.is_ok());
  for (const char* want : {"128", "576", "96", "144", "--partial-groups"})
    EXPECT_NE(nd.message().find(want), std::string::npos) << want << " in: " << nd.message();
  EXPECT_TRUE((lc::QuantGrid{.bits = 4, .group = 128, .partial_groups = true}.validate(576).is_ok()));
  EXPECT_EQ((lc::QuantGrid{.group = 128}.n_groups(576)), 5);
}

// ---- RTN ----------------------------------------------------------------------------------

TEST(Rtn, CodesScalesAndDequantize) {
  const auto w = random_matrix(8, 64, 5);
  for (int64_t group : {0, 16}) {
    lc::QuantGrid g{.bits = 4, .group = group};
    auto q = lc::rtn(w, 8, 64, g);
    ASSERT_TRUE(q.is_ok());
    EXPECT_EQ(q->n_groups(), group ? 4 : 1);
    const auto d = lc::dequantize(*q);
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 64; ++c) {
        EXPECT_EQ(q->g_idx[static_cast<size_t>(c)], group ? c / group : 0);
        const float x = w[static_cast<size_t>(r * 64 + c)];
        EXPECT_EQ(d[static_cast<size_t>(r * 64 + c)], lc::quantize_value(x, q->params(r, c), 15));
        EXPECT_LE(std::fabs(d[static_cast<size_t>(r * 64 + c)] - x), q->params(r, c).scale * 0.5f + 1e-6f);
      }
  }
  EXPECT_FALSE(lc::rtn(w, 8, 64, lc::QuantGrid{.bits = 4, .group = 24}).is_ok());
}

// --partial-groups: 64 columns in groups of 24 are 24 + 24 + 16, each with its own grid.
TEST(Rtn, PartialLastGroup) {
  const auto w = random_matrix(8, 64, 6);
  const lc::QuantGrid g{.bits = 3, .group = 24, .partial_groups = true};
  auto q = lc::rtn(w, 8, 64, g);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->n_groups(), 3);
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t gi = 0; gi < 3; ++gi) {
      const lc::GridParams p = lc::find_params(g, w.data() + r * 64 + gi * 24, gi == 2 ? 16 : 24);
      EXPECT_EQ(q->scales[static_cast<size_t>(r * 3 + gi)], p.scale) << r << " " << gi;
      EXPECT_EQ(q->zeros[static_cast<size_t>(r * 3 + gi)], p.zero);
    }
  for (int64_t c = 0; c < 64; ++c) EXPECT_EQ(q->g_idx[static_cast<size_t>(c)], c / 24);
}

// ---- GPTQ ---------------------------------------------------------------------------------

TEST(Gptq, IdentityHessianEqualsRtn) {
  const int64_t n_out = 32, n_in = 128;
  const auto w = random_matrix(n_out, n_in, 21);
  const auto h = identity(n_in);
  for (int64_t group : {0, 32, 48})  // 48: partial last group (128 = 2 x 48 + 32)
    for (bool sym : {false, true}) {
      lc::GptqOptions o;
      o.grid = {.bits = 3, .sym = sym, .group = group, .partial_groups = group == 48};
      auto g = lc::gptq(w, n_out, n_in, h, o);
      auto r = lc::rtn(w, n_out, n_in, o.grid);
      ASSERT_TRUE(g.is_ok() && r.is_ok());
      EXPECT_EQ(g->q.codes, r->codes) << "group " << group << " sym " << sym;
      EXPECT_EQ(g->q.scales, r->scales);
      EXPECT_EQ(g->q.zeros, r->zeros);
      EXPECT_EQ(g->w_hat, lc::dequantize(r.value()));
    }
}

TEST(Gptq, BlockSizeDoesNotChangeResult) {
  const Layer& l = correlated_layer();
  for (int64_t group : {0, 32, 40}) {  // 40: a partial last group
    std::vector<lc::GptqResult> res;
    for (int64_t b : {1, 50, 128}) {  // 50: groups straddle block ends
      lc::GptqOptions o;
      o.grid = {.bits = 4, .group = group, .partial_groups = true};
      o.block_size = b;
      auto g = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      res.push_back(std::move(g).value());
    }
    for (size_t k = 1; k < res.size(); ++k) {
      size_t code_diff = 0;
      float max_diff = 0;
      for (size_t i = 0; i < res[0].w_hat.size(); ++i) {
        code_diff += res[0].q.codes[i] != res[k].q.codes[i];
        max_diff = std::max(max_diff, std::fabs(res[0].w_hat[i] - res[k].w_hat[i]));
      }
      EXPECT_EQ(code_diff, 0u) << "group " << group << " block variant " << k;
      EXPECT_LT(max_diff, 1e-5f);
      EXPECT_NEAR(res[0].loss, res[k].loss, 1e-4 * res[0].loss);
    }
  }
}

// GPTQ's Cholesky walk equals OBQ in a fixed column order done the explicit way (thesis Eq. 3.7
// with the Lemma 1 downdate of an explicitly inverted H, per row, in double).
TEST(Gptq, MatchesExplicitFixedOrderObq) {
  const int64_t n_out = 16, n_in = 64, samples = 512;
  const auto h = hessian_of(correlated_inputs(n_in, samples, 41), n_in, samples);
  const auto w = random_matrix(n_out, n_in, 42);
  lc::GptqOptions o;
  o.grid = {.bits = 3};
  auto g = lc::gptq(w, n_out, n_in, h, o);
  ASSERT_TRUE(g.is_ok());
  // (H + λI)^-1 by Gauss-Jordan.
  std::vector<double> a = h, inv = identity(n_in);
  for (int64_t i = 0; i < n_in; ++i) a[static_cast<size_t>(i * n_in + i)] += g->damp;
  for (int64_t c = 0; c < n_in; ++c) {
    const double piv = a[static_cast<size_t>(c * n_in + c)];
    for (int64_t j = 0; j < n_in; ++j) {
      a[static_cast<size_t>(c * n_in + j)] /= piv;
      inv[static_cast<size_t>(c * n_in + j)] /= piv;
    }
    for (int64_t r = 0; r < n_in; ++r) {
      if (r == c) continue;
      const double f = a[static_cast<size_t>(r * n_in + c)];
      for (int64_t j = 0; j < n_in; ++j) {
        a[static_cast<size_t>(r * n_in + j)] -= f * a[static_cast<size_t>(c * n_in + j)];
        inv[static_cast<size_t>(r * n_in + j)] -= f * inv[static_cast<size_t>(c * n_in + j)];
      }
    }
  }
  size_t diff = 0;
  for (int64_t r = 0; r < n_out; ++r) {
    std::vector<double> hinv = inv, row(w.begin() + r * n_in, w.begin() + (r + 1) * n_in);
    const lc::GridParams p{g->q.scales[static_cast<size_t>(r)], g->q.zeros[static_cast<size_t>(r)]};
    for (int64_t j = 0; j < n_in; ++j) {
      const int code = lc::quantize_code(static_cast<float>(row[static_cast<size_t>(j)]), p, 7);
      const double qv = lc::dequantize_code(code, p), d = hinv[static_cast<size_t>(j * n_in + j)];
      diff += code != g->q.codes[static_cast<size_t>(r * n_in + j)];
      const double f = (row[static_cast<size_t>(j)] - qv) / d;
      for (int64_t c = j; c < n_in; ++c) row[static_cast<size_t>(c)] -= f * hinv[static_cast<size_t>(c * n_in + j)];
      std::vector<double> colj(static_cast<size_t>(n_in));
      for (int64_t c = 0; c < n_in; ++c) colj[static_cast<size_t>(c)] = hinv[static_cast<size_t>(c * n_in + j)];
      for (int64_t x = 0; x < n_in; ++x)
        for (int64_t y = 0; y < n_in; ++y)
          hinv[static_cast<size_t>(x * n_in + y)] -= colj[static_cast<size_t>(x)] * colj[static_cast<size_t>(y)] / d;
    }
  }
  EXPECT_EQ(diff, 0u);
}

TEST(Gptq, LossIsTraceOfDampedHessianForm) {
  const Layer& l = correlated_layer();
  for (bool act : {false, true}) {
    lc::GptqOptions o;
    o.grid = {.bits = 3, .group = 64};
    o.act_order = act;
    auto g = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
    ASSERT_TRUE(g.is_ok());
    std::vector<double> hd = l.h;
    for (int64_t i = 0; i < l.n_in; ++i) hd[static_cast<size_t>(i * l.n_in + i)] += g->damp;
    double tr = 0;
    for (int64_t r = 0; r < l.n_out; ++r)
      for (int64_t i = 0; i < l.n_in; ++i) {
        const double di = l.w[static_cast<size_t>(r * l.n_in + i)] - g->w_hat[static_cast<size_t>(r * l.n_in + i)];
        for (int64_t j = 0; j < l.n_in; ++j)
          tr += di * hd[static_cast<size_t>(i * l.n_in + j)] *
                (l.w[static_cast<size_t>(r * l.n_in + j)] - g->w_hat[static_cast<size_t>(r * l.n_in + j)]);
      }
    EXPECT_NEAR(2.0 * g->loss, tr, 2e-3 * tr) << "act_order " << act;
  }
}

TEST(Gptq, ActOrderStaticGroupsKeepBoundaries) {
  const Layer& l = correlated_layer();
  lc::GptqOptions o;
  o.grid = {.bits = 4, .group = 32};
  o.act_order = true;
  o.static_groups = true;
  auto g = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
  ASSERT_TRUE(g.is_ok());
  ASSERT_EQ(g->perm.size(), static_cast<size_t>(l.n_in));
  bool permuted = false;
  for (int64_t k = 0; k < l.n_in; ++k) permuted |= g->perm[static_cast<size_t>(k)] != k;
  EXPECT_TRUE(permuted);
  for (int64_t c = 0; c < l.n_in; ++c) EXPECT_EQ(g->q.g_idx[static_cast<size_t>(c)], c / 32);
  for (int64_t r = 0; r < l.n_out; ++r)
    for (int64_t gi = 0; gi < l.n_in / 32; ++gi) {
      const lc::GridParams p = lc::find_params(o.grid, l.w.data() + r * l.n_in + gi * 32, 32);
      EXPECT_EQ(g->q.scales[static_cast<size_t>(r * 8 + gi)], p.scale);
      EXPECT_EQ(g->q.zeros[static_cast<size_t>(r * 8 + gi)], p.zero);
    }
  EXPECT_EQ(g->w_hat, lc::dequantize(g->q));
}

TEST(Gptq, ActOrderDynamicGroupsPermuteGroups) {
  const Layer& l = correlated_layer();
  lc::GptqOptions o;
  o.grid = {.bits = 4, .group = 32};
  o.act_order = true;
  auto g = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
  ASSERT_TRUE(g.is_ok());
  std::vector<int> count(8, 0);
  for (int32_t gi : g->q.g_idx) {
    ASSERT_TRUE(gi >= 0 && gi < 8);
    ++count[static_cast<size_t>(gi)];
  }
  for (int c : count) EXPECT_EQ(c, 32);
  for (int64_t k = 0; k < l.n_in; ++k) EXPECT_EQ(g->q.g_idx[static_cast<size_t>(g->perm[static_cast<size_t>(k)])], k / 32);
  // diag(H) descending along the permutation
  for (int64_t k = 1; k < l.n_in; ++k) {
    const auto a = g->perm[static_cast<size_t>(k - 1)], b = g->perm[static_cast<size_t>(k)];
    EXPECT_GE(l.h[static_cast<size_t>(a * l.n_in + a)], l.h[static_cast<size_t>(b * l.n_in + b)]);
  }
  EXPECT_EQ(g->w_hat, lc::dequantize(g->q));
}

TEST(Gptq, BeatsRtnOnCorrelatedHessian) {
  const Layer& l = correlated_layer();
  for (int bits : {3, 4})
    for (int64_t group : {0, 64})
      for (bool act : {false, true}) {
        lc::GptqOptions o;
        o.grid = {.bits = bits, .group = group};
        o.act_order = act;
        auto g = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
        auto r = lc::rtn(l.w, l.n_out, l.n_in, o.grid);
        ASSERT_TRUE(g.is_ok() && r.is_ok());
        const double eg = recon(l, g->w_hat), er = recon(l, lc::dequantize(*r));
        EXPECT_LT(eg, 0.95 * er) << bits << " bits, group " << group << ", act_order " << act;
      }
}

TEST(Gptq, DeadInputsGiveZeroColumns) {
  const int64_t n_out = 16, n_in = 64, samples = 256;
  auto x = random_matrix(n_in, samples, 9);
  for (int64_t f : {3, 17, 40})
    for (int64_t t = 0; t < samples; ++t) x[static_cast<size_t>(f * samples + t)] = 0.0f;
  const auto h = hessian_of(x, n_in, samples);
  const auto w = random_matrix(n_out, n_in, 10);
  for (bool act : {false, true}) {
    lc::GptqOptions o;
    o.grid = {.bits = 4, .group = 16};
    o.act_order = act;
    auto g = lc::gptq(w, n_out, n_in, h, o);
    ASSERT_TRUE(g.is_ok());
    EXPECT_EQ(g->n_dead, 3);
    for (int64_t r = 0; r < n_out; ++r)
      for (int64_t f : {3, 17, 40}) EXPECT_EQ(g->w_hat[static_cast<size_t>(r * n_in + f)], 0.0f);
  }
  lc::SparseGptOptions so;
  auto s = lc::sparsegpt(w, n_out, n_in, h, so);
  ASSERT_TRUE(s.is_ok());
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t f : {3, 17, 40}) EXPECT_EQ(s->w[static_cast<size_t>(r * n_in + f)], 0.0f);
}

TEST(Gptq, NegativeHessianIsRejected) {
  const int64_t n = 32;
  const auto w = random_matrix(4, n, 1);
  auto g = lc::gptq(w, 4, n, identity(n, -1.0), lc::GptqOptions{});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("negative"), std::string::npos) << g.status().message();
}

TEST(Gptq, SingularHessianRaisesDampening) {
  // Integer inputs with duplicated features: H is exactly singular and the Cholesky hits a zero pivot.
  const int64_t n = 32, samples = 64;
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<float> x(static_cast<size_t>(n * samples));
  for (int64_t f = 0; f < n; ++f)
    for (int64_t t = 0; t < samples; ++t)
      x[static_cast<size_t>(f * samples + t)] = f % 2 ? x[static_cast<size_t>((f - 1) * samples + t)] : static_cast<float>(d(rng));
  const auto h = hessian_of(x, n, samples);
  const auto w = random_matrix(8, n, 2);
  lc::GptqOptions o;
  o.hessian.percdamp = 0.0;
  auto g = lc::gptq(w, 8, n, h, o);
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_GT(g->damp_retries, 0);
  EXPECT_GT(g->percdamp_used, 0.0);
  EXPECT_GT(g->damp, 0.0);
  // An indefinite H with a positive diagonal cannot be fixed within the limit.
  std::vector<double> bad = identity(n);
  bad[1] = bad[static_cast<size_t>(n)] = 3.0;  // [[1,3],[3,1]] block: eigenvalue -2
  auto b = lc::gptq(w, 8, n, bad, lc::GptqOptions{});
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("not positive definite"), std::string::npos) << b.status().message();
}

TEST(Gptq, FloatHessianOverloadMatches) {
  const Layer& l = correlated_layer();
  std::vector<float> hf(l.h.begin(), l.h.end());
  lc::GptqOptions o;
  o.grid = {.bits = 4, .group = 32};
  auto a = lc::gptq(l.w, l.n_out, l.n_in, l.h, o);
  auto b = lc::gptq(l.w, l.n_out, l.n_in, hf, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  size_t diff = 0;
  for (size_t i = 0; i < a->q.codes.size(); ++i) diff += a->q.codes[i] != b->q.codes[i];
  EXPECT_LT(diff, a->q.codes.size() / 100);  // f32 rounding of H may flip a few ties
  EXPECT_FALSE(lc::gptq(l.w, l.n_out, l.n_in, l.h, lc::GptqOptions{.grid = {.bits = 4, .group = 48}}).is_ok());
}

// ---- reconstruction error -----------------------------------------------------------------

TEST(ReconstructionError, EqualsRelativeOutputError) {
  const int64_t n_out = 6, n_in = 10, samples = 40;
  const auto x = random_matrix(n_in, samples, 31);
  const auto h = hessian_of(x, n_in, samples);
  const auto w = random_matrix(n_out, n_in, 32);
  auto w_hat = w;
  for (float& v : w_hat) v = std::round(v * 2.0f) / 2.0f;
  double num = 0, den = 0;
  for (int64_t r = 0; r < n_out; ++r)
    for (int64_t t = 0; t < samples; ++t) {
      double y = 0, yh = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        y += w[static_cast<size_t>(r * n_in + i)] * x[static_cast<size_t>(i * samples + t)];
        yh += w_hat[static_cast<size_t>(r * n_in + i)] * x[static_cast<size_t>(i * samples + t)];
      }
      num += (y - yh) * (y - yh);
      den += y * y;
    }
  auto e = lc::reconstruction_error(w, w_hat, h, n_out, n_in);
  ASSERT_TRUE(e.is_ok());
  EXPECT_NEAR(*e, num / den, 1e-9 + 1e-6 * num / den);
}

// ---- SparseGPT and magnitude pruning ------------------------------------------------------

TEST(SparseGpt, ZeroSparsityKeepsWeights) {
  const Layer& l = correlated_layer();
  lc::SparseGptOptions o;
  o.sparsity = 0.0;
  auto s = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, o);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->w, l.w);
  EXPECT_TRUE(std::all_of(s->mask.begin(), s->mask.end(), [](uint8_t m) { return m == 1; }));
  EXPECT_EQ(s->loss, 0.0);
}

TEST(SparseGpt, NmGroupsHaveNZeros) {
  const Layer& l = correlated_layer();
  for (auto [pn, pm] : {std::pair<int64_t, int64_t>{2, 4}, {4, 8}}) {
    lc::SparseGptOptions o;
    o.prune_n = pn;
    o.prune_m = pm;
    auto s = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, o);
    ASSERT_TRUE(s.is_ok());
    for (int64_t r = 0; r < l.n_out; ++r)
      for (int64_t c = 0; c < l.n_in; c += pm) {
        int64_t zeros = 0, pruned = 0;
        for (int64_t t = 0; t < pm; ++t) {
          zeros += s->w[static_cast<size_t>(r * l.n_in + c + t)] == 0.0f;
          pruned += s->mask[static_cast<size_t>(r * l.n_in + c + t)] == 0;
        }
        EXPECT_EQ(zeros, pn);  // no weight was zero before
        EXPECT_EQ(pruned, pn);
      }
    auto m = lc::prune_magnitude(l.w, l.n_out, l.n_in, {.prune_n = pn, .prune_m = pm});
    ASSERT_TRUE(m.is_ok());
    EXPECT_LT(recon(l, s->w), recon(l, m->w)) << pn << ":" << pm;
  }
}

TEST(SparseGpt, UnstructuredReachesFraction) {
  const Layer& l = correlated_layer();
  for (double p : {0.3, 0.5, 0.7}) {
    lc::SparseGptOptions o;
    o.sparsity = p;
    auto s = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, o);
    ASSERT_TRUE(s.is_ok());
    const auto zeros = std::count(s->w.begin(), s->w.end(), 0.0f);
    const auto pruned = std::count(s->mask.begin(), s->mask.end(), uint8_t{0});
    EXPECT_EQ(zeros, pruned);
    EXPECT_LE(std::fabs(static_cast<double>(zeros) - p * static_cast<double>(l.w.size())), static_cast<double>(l.n_out));
    auto m = lc::prune_magnitude(l.w, l.n_out, l.n_in, {.sparsity = p});
    ASSERT_TRUE(m.is_ok());
    EXPECT_EQ(std::count(m->w.begin(), m->w.end(), 0.0f), static_cast<int64_t>(p * static_cast<double>(l.w.size())));
    const double es = recon(l, s->w), em = recon(l, m->w);
    EXPECT_LT(es, 0.8 * em) << "sparsity " << p;
  }
}

TEST(SparseGpt, JointQuantizationStaysOnGrid) {
  const Layer& l = correlated_layer();
  for (int64_t group : {0, 32}) {
    lc::SparseGptOptions o;
    o.sparsity = 0.5;
    o.quant = lc::QuantGrid{.bits = 4, .group = group};
    auto s = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, o);
    ASSERT_TRUE(s.is_ok());
    ASSERT_TRUE(s->q.has_value());
    EXPECT_EQ(s->w, lc::dequantize(*s->q));
    for (size_t i = 0; i < s->w.size(); ++i) {
      if (!s->mask[i]) { EXPECT_EQ(s->w[i], 0.0f); }
    }
    lc::SparseGptOptions sparse_only;
    auto p = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, sparse_only);
    ASSERT_TRUE(p.is_ok());
    EXPECT_GT(recon(l, s->w), recon(l, p->w));  // rounding costs something...
    EXPECT_LT(recon(l, s->w), 2.0 * recon(l, p->w) + 0.05);  // ...but not much at 4 bits
  }
}

TEST(SparseGpt, BadNmNamesValues) {
  const Layer& l = correlated_layer();
  lc::SparseGptOptions o;
  o.prune_n = 3;
  o.prune_m = 2;
  auto s = lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, o);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("3:2"), std::string::npos) << s.status().message();
  const auto w = random_matrix(4, 250, 1);
  auto m = lc::prune_magnitude(w, 4, 250, {.prune_n = 2, .prune_m = 4});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("250"), std::string::npos) << m.status().message();
  EXPECT_FALSE(lc::sparsegpt(l.w, l.n_out, l.n_in, l.h, {.sparsity = 1.0}).is_ok());
}

TEST(Magnitude, PerRowScope) {
  const auto w = random_matrix(8, 64, 12);
  auto m = lc::prune_magnitude(w, 8, 64, {.sparsity = 0.25, .scope = lc::MagnitudeScope::row});
  ASSERT_TRUE(m.is_ok());
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(std::count(m->mask.begin() + r * 64, m->mask.begin() + (r + 1) * 64, uint8_t{0}), 16);
    float kept_min = 1e30f, pruned_max = 0;
    for (int64_t c = 0; c < 64; ++c) {
      const float a = std::fabs(w[static_cast<size_t>(r * 64 + c)]);
      (m->mask[static_cast<size_t>(r * 64 + c)] ? kept_min : pruned_max) =
          m->mask[static_cast<size_t>(r * 64 + c)] ? std::min(kept_min, a) : std::max(pruned_max, a);
    }
    EXPECT_LE(pruned_max, kept_min);
  }
}

// ---- timings (not run by default: --gtest_also_run_disabled_tests) -------------------------

TEST(CompressTiming, DISABLED_GptqLayers) {
  for (auto [n_out, n_in] : {std::pair<int64_t, int64_t>{576, 1536}, {1536, 576}, {4096, 4096}}) {
    const auto w = random_matrix(n_out, n_in, 1, 0.02f);
    std::vector<double> h(static_cast<size_t>(n_in * n_in));  // Kac-Murdock-Szegő: rho^|i-j|
    for (int64_t i = 0; i < n_in; ++i)
      for (int64_t j = 0; j < n_in; ++j) h[static_cast<size_t>(i * n_in + j)] = std::pow(0.9, std::abs(i - j));
    auto t0 = std::chrono::steady_clock::now();
    auto ph = lc::prepare_hessian(h, n_in, {});
    auto t1 = std::chrono::steady_clock::now();
    lc::GptqOptions o;
    o.grid = {.bits = 4, .group = n_in % 128 == 0 ? 128 : 64};
    auto g = lc::gptq(w, n_out, n_in, h, o);
    auto t2 = std::chrono::steady_clock::now();
    lc::SparseGptOptions so;
    auto s = lc::sparsegpt(w, n_out, n_in, h, so);
    auto t3 = std::chrono::steady_clock::now();
    ASSERT_TRUE(ph.is_ok() && g.is_ok() && s.is_ok()) << g.status().to_string() << s.status().to_string();
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    std::printf("%lldx%lld g%lld: hessian prep %.3f s, gptq (incl. prep) %.3f s, sparsegpt 50%% %.3f s\n",
                static_cast<long long>(n_out), static_cast<long long>(n_in), static_cast<long long>(o.grid.group), sec(t0, t1), sec(t1, t2), sec(t2, t3));
  }
}
