// The Backend's fused-op defaults (runtime/backend.cpp) on the CPU backend equal the compositions
// of primitives they replace in the model's block, bit for bit: rmsnorm_linear_many = rmsnorm +
// linear_many, rmsnorm_swiglu = rmsnorm + swiglu, rope_attention = rope(q) + rope(k) + attention
// (outputs, q and k rotated in place, and the KV cache's rows). Also: x (the residual stream) is
// left unchanged, and a norm without weight or scratch is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lithe/runtime/backend.h"
#include "lithe/runtime/kv_cache.h"

namespace lithe {
namespace {

Tensor randn(Shape shape, uint32_t seed, float mean = 0.0f, float sd = 1.0f) {
  auto t = Tensor::empty(DType::f32, shape);
  EXPECT_TRUE(t.is_ok());
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(mean, sd);
  for (int64_t i = 0; i < t->numel(); ++i) t->data_as<float>()[i] = nd(rng);
  return *t;
}

Tensor zeros(Shape shape) {
  auto t = Tensor::empty(DType::f32, shape);
  EXPECT_TRUE(t.is_ok());
  std::memset(t->data(), 0, t->nbytes());
  return *t;
}

Tensor copy(const Tensor& t) {
  Tensor c = zeros(t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The first n rows of two [rows, cols] tensors (a cache's filled slots) hold the same bytes.
bool same_rows(const Tensor& a, const Tensor& b, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * a.nbytes() / static_cast<size_t>(a.dim(0));
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), bytes) == 0;
}

TEST(BackendFused, RmsNormProjectionsEqualTheComposition) {
  auto be = make_cpu_backend();
  const int64_t n_in = 48, n_q = 40, n_kv = 24, ff = 72;
  uint32_t seed = 1;
  for (int64_t m : {1, 3, 9}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    const Tensor x = randn({m, n_in}, seed++, 0.0f, 2.0f), x0 = copy(x);
    const Tensor nw = randn({n_in}, seed++, 1.0f, 0.3f);
    const Tensor wq = randn({n_q, n_in}, seed++), wk = randn({n_kv, n_in}, seed++), wv = randn({n_kv, n_in}, seed++);
    const Tensor wg = randn({ff, n_in}, seed++), wu = randn({ff, n_in}, seed++);
    // Fused defaults.
    Tensor h = zeros({m, n_in}), q = zeros({m, n_q}), k = zeros({m, n_kv}), v = zeros({m, n_kv});
    Tensor g = zeros({m, ff}), u = zeros({m, ff});
    const Tensor* ws[] = {&wq, &wk, &wv};
    Tensor* ys[] = {&q, &k, &v};
    const InputNorm norm{&nw, 1e-5f, &h};
    ASSERT_TRUE(be->rmsnorm_linear_many(norm, ws, x, m, ys).is_ok());
    ASSERT_TRUE(be->rmsnorm_swiglu(norm, wg, wu, x, m, g, u).is_ok());
    // The composition the model used to issue.
    Tensor h2 = zeros({m, n_in}), q2 = zeros({m, n_q}), k2 = zeros({m, n_kv}), v2 = zeros({m, n_kv});
    Tensor g2 = zeros({m, ff}), u2 = zeros({m, ff});
    Tensor* ys2[] = {&q2, &k2, &v2};
    ASSERT_TRUE(be->rmsnorm(x, m, nw, 1e-5f, h2).is_ok());
    ASSERT_TRUE(be->linear_many(ws, h2, m, ys2).is_ok());
    ASSERT_TRUE(be->swiglu(wg, wu, h2, m, g2, u2).is_ok());
    EXPECT_TRUE(same_bytes(q, q2) && same_bytes(k, k2) && same_bytes(v, v2)) << "q/k/v";
    EXPECT_TRUE(same_bytes(g, g2)) << "swiglu";
    EXPECT_TRUE(same_bytes(x, x0)) << "x changed";
  }
}

TEST(BackendFused, NormWithoutWeightOrScratchIsAnError) {
  auto be = make_cpu_backend();
  const Tensor x = randn({1, 8}, 1), w = randn({4, 8}, 2), nw = randn({8}, 3);
  Tensor y = zeros({1, 4}), y2 = zeros({1, 4});
  const Tensor* ws[] = {&w};
  Tensor* ys[] = {&y};
  const InputNorm no_scratch{&nw, 1e-5f, nullptr}, no_weight{nullptr, 1e-5f, &y2};
  EXPECT_EQ(be->rmsnorm_linear_many(no_scratch, ws, x, 1, ys).code(), StatusCode::invalid_argument);
  EXPECT_EQ(be->rmsnorm_swiglu(no_weight, w, w, x, 1, y, y2).code(), StatusCode::invalid_argument);
}

TEST(BackendFused, RopeAttentionEqualsRopeThenAttention) {
  auto be = make_cpu_backend();
  const AttentionShape sh{6, 2, 32, 1.0f / std::sqrt(32.0f)};
  const int64_t q_dim = 6 * 32, kv_dim = 2 * 32;
  cpu::RopeTable rt;
  rt.rot_dim = 24;  // partial rotation
  for (int i = 0; i < 12; ++i) rt.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -i / 12.0)));
  uint32_t seed = 100;
  for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half})
    for (DType kvt : {DType::f32, DType::f16}) {
      auto c1 = KvCache::create(2, 64, kv_dim, kvt), c2 = KvCache::create(2, 64, kv_dim, kvt);
      ASSERT_TRUE(c1.is_ok() && c2.is_ok());
      for (int64_t m : {11, 1, 1, 5}) {
        SCOPED_TRACE("style " + std::to_string(static_cast<int>(style)) + " kv " + std::string(dtype_name(kvt)) +
                     " m=" + std::to_string(m));
        std::vector<int32_t> pos(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(3 * (c1->size() + i) + 7);
        auto s1 = c1->append(pos.data(), m), s2 = c2->append(pos.data(), m);
        ASSERT_TRUE(s1.is_ok() && s2.is_ok());
        for (int64_t layer = 0; layer < 2; ++layer) {
          Tensor q = randn({m, q_dim}, seed++), k = randn({m, kv_dim}, seed++);
          const Tensor v = randn({m, kv_dim}, seed++);
          Tensor q2 = copy(q), k2 = copy(k), o = zeros({m, q_dim}), o2 = zeros({m, q_dim});
          ASSERT_TRUE(be->rope_attention(*c1, layer, q, k, v, m, pos.data(), s1->data(), rt, style, sh, o).is_ok());
          ASSERT_TRUE(be->rope(q2, m, sh.n_heads, sh.head_dim, pos.data(), rt, style).is_ok());
          ASSERT_TRUE(be->rope(k2, m, sh.n_kv_heads, sh.head_dim, pos.data(), rt, style).is_ok());
          ASSERT_TRUE(be->attention(*c2, layer, q2, k2, v, m, pos.data(), s2->data(), sh, o2).is_ok());
          EXPECT_TRUE(same_bytes(o, o2)) << "out, layer " << layer;
          EXPECT_TRUE(same_bytes(q, q2)) << "q, layer " << layer;
          EXPECT_TRUE(same_bytes(k, k2)) << "k, layer " << layer;
          const int64_t n = c1->size();
          EXPECT_TRUE(same_rows(c1->k(layer), c2->k(layer), n) && same_rows(c1->v(layer), c2->v(layer), n))
              << "cache, layer " << layer;
        }
      }
    }
}

}  // namespace
}  // namespace lithe
