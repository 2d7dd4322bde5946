// The gq runtime format (kernels/group_quant.h, compress::to_runtime): a quantized matrix from the
// solvers becomes the canonical kernel-order matrix (act-order columns sorted by group, pruned
// weights on the zero point, 2:4 detected) without changing the weights it stands for; parsing of
// format names; packed tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "lithe/compress/checkpoint.h"
#include "lithe/compress/rtn.h"
#include "lithe/core/half.h"
#include "lithe/kernels/group_quant.h"

using namespace lithe;
namespace lc = lithe::compress;

namespace {

std::vector<float> random_weights(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n));
  for (auto& v : w) v = d(rng);
  return w;
}

// RTN with f16-exact scales (as a checkpoint stores them).
lc::QuantizedMatrix quantized(int64_t n_out, int64_t n_in, const lc::QuantGrid& g, uint64_t seed) {
  auto q = lc::rtn(random_weights(n_out * n_in, seed), n_out, n_in, g);
  EXPECT_TRUE(q.is_ok()) << q.status().to_string();
  for (float& s : q->scales) s = f16_to_f32(f32_to_f16(s));
  return *q;
}

void expect_same_weights(const lc::QuantizedMatrix& q, const std::vector<uint8_t>& mask, const gq::Matrix& m) {
  auto want = lc::dequantize(q);
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] == 0) want[i] = 0.0f;
  const auto got = gq::dequantize(m);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "weight " << i;
}

}  // namespace

TEST(GqFormat, RuntimeMatrixStandsForTheSameWeights) {
  for (const lc::QuantGrid g : {lc::QuantGrid{.bits = 4, .sym = false, .group = 32},
                                lc::QuantGrid{.bits = 3, .sym = true, .group = 64},
                                lc::QuantGrid{.bits = 2, .sym = false, .group = 128},
                                lc::QuantGrid{.bits = 8, .sym = true, .group = 0}}) {
    const auto q = quantized(24, 256, g, 7);
    auto m = lc::to_runtime(q, {});
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_TRUE(m->perm.empty());  // natural group order: no permutation
    EXPECT_EQ(m->fmt.group, g.group == 0 ? 256 : g.group);
    EXPECT_EQ(m->fmt.sym, g.sym);
    EXPECT_FALSE(m->fmt.sparse24);
    expect_same_weights(q, {}, *m);
  }
}

TEST(GqFormat, ShortLastGroupIsKept) {
  // SmolLM2's 576 inputs in groups of 128: 4 groups of 128 and one of 64.
  const auto q = quantized(8, 576, {.bits = 4, .sym = false, .group = 128, .partial_groups = true}, 3);
  auto m = lc::to_runtime(q, {});
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->n_groups(), 5);
  expect_same_weights(q, {}, *m);
}

TEST(GqFormat, ActOrderColumnsAreSortedByGroup) {
  auto q = quantized(16, 256, {.bits = 4, .sym = false, .group = 64}, 5);
  // An act-order g_idx: columns assigned to groups in a shuffled order (64 each), with the grids
  // moved along, so the weights are a column permutation of what RTN made.
  std::vector<int32_t> cols(256);
  for (int i = 0; i < 256; ++i) cols[static_cast<size_t>(i)] = i;
  std::shuffle(cols.begin(), cols.end(), std::mt19937_64(9));
  lc::QuantizedMatrix p = q;
  for (int64_t k = 0; k < 256; ++k) {
    const auto c = static_cast<size_t>(cols[static_cast<size_t>(k)]);
    p.g_idx[c] = static_cast<int32_t>(k / 64);
    for (int64_t r = 0; r < 16; ++r) p.codes[static_cast<size_t>(r * 256) + c] = q.codes[static_cast<size_t>(r * 256 + k)];
  }
  auto m = lc::to_runtime(p, {});
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  // A stable sort by group: each group's columns in column order.
  std::vector<int32_t> want = cols;
  for (int g = 0; g < 4; ++g) std::sort(want.begin() + g * 64, want.begin() + (g + 1) * 64);
  EXPECT_EQ(m->perm, want);
  expect_same_weights(p, {}, *m);
}

TEST(GqFormat, PrunedWeightsSitOnTheZeroPointAnd2to4IsDetected) {
  const auto q = quantized(8, 128, {.bits = 4, .sym = true, .group = 32}, 11);
  std::vector<uint8_t> mask(q.codes.size(), 1);
  for (size_t i = 0; i < mask.size(); i += 4) mask[i] = mask[i + 2] = 0;  // 2:4
  auto m = lc::to_runtime(q, mask);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_TRUE(m->fmt.sparse24);
  expect_same_weights(q, mask, *m);
  // Unstructured pruning is run dense.
  std::vector<uint8_t> loose(q.codes.size(), 1);
  for (size_t i = 0; i < loose.size(); i += 7) loose[i] = 0;
  auto u = lc::to_runtime(q, loose);
  ASSERT_TRUE(u.is_ok());
  EXPECT_FALSE(u->fmt.sparse24);
  expect_same_weights(q, loose, *u);
}

TEST(GqFormat, BadMatricesAreRefusedWithTheValue) {
  auto q = quantized(4, 64, {.bits = 4, .sym = false, .group = 32}, 1);
  q.zeros[0] = 2.5f;
  auto m = lc::to_runtime(q, {});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("2.5"), std::string::npos) << m.status().to_string();

  gq::Matrix r = gq::random_matrix({.bits = 3, .group = 32, .sym = false, .sparse24 = false}, 4, 64, 2, true);
  EXPECT_TRUE(gq::validate(r).is_ok());
  r.codes[5] = 8;
  auto st = gq::validate(r);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("code 8"), std::string::npos) << st.to_string();
  r.codes[5] = 0;
  r.perm[0] = r.perm[1];
  EXPECT_FALSE(gq::validate(r).is_ok());
}

TEST(GqFormat, RandomMatricesHaveTheirFormat) {
  const QuantFormat f{.bits = 4, .group = 128, .sym = true, .sparse24 = true};
  const auto m = gq::random_matrix(f, 16, 576, 4, true);
  EXPECT_TRUE(gq::validate(m).is_ok());
  EXPECT_TRUE(gq::is_2to4(m));
  EXPECT_EQ(m.n_groups(), 5);
  // reference_linear is the dequantized matrix times x.
  std::vector<float> x(576), y(16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  gq::reference_linear(m, x.data(), 1, y.data());
  const auto w = gq::dequantize(m);
  for (int r = 0; r < 16; ++r) {
    double acc = 0;
    for (int c = 0; c < 576; ++c) acc += static_cast<double>(w[static_cast<size_t>(r * 576 + c)]) * x[static_cast<size_t>(c)];
    EXPECT_FLOAT_EQ(y[static_cast<size_t>(r)], static_cast<float>(acc));
  }
}

TEST(GqFormat, ParsesFormatNames) {
  auto f = gq::parse_format("int4-g128");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*f, (QuantFormat{.bits = 4, .group = 128, .sym = false, .sparse24 = false}));
  f = gq::parse_format("int3-g64-sym");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*f, (QuantFormat{.bits = 3, .group = 64, .sym = true, .sparse24 = false}));
  f = gq::parse_format("int8");
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->group, 0);
  f = gq::parse_format("int4-g128-sym-2:4");
  ASSERT_TRUE(f.is_ok());
  EXPECT_TRUE(f->sparse24);
  for (const char* bad : {"int5", "int4-g", "int4-g128-asym", "q4_0", "int"}) {
    auto b = gq::parse_format(bad);
    ASSERT_FALSE(b.is_ok()) << bad;
    EXPECT_NE(b.status().message().find(bad), std::string::npos) << b.status().to_string();
  }
}

TEST(GqFormat, PackedTensorsKeepTheirDescriptor) {
  PackedWeight p;
  p.fmt = {.bits = 4, .group = 128, .sym = false, .sparse24 = false};
  p.n_out = 8;
  p.n_in = 256;
  p.bytes = 1000;
  auto buf = alloc_host(1024);
  ASSERT_TRUE(buf.is_ok());
  auto t = Tensor::packed(*buf, 16, p);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype(), DType::gq);
  EXPECT_EQ(t->shape(), (Shape{8, 256}));
  EXPECT_EQ(t->nbytes(), 1000u);
  EXPECT_NE(t->describe().find("int4 g128 asym"), std::string::npos) << t->describe();
  auto c = t->to(Device::cpu);
  ASSERT_TRUE(c.is_ok());
  ASSERT_NE(c->packed(), nullptr);
  EXPECT_EQ(c->packed()->bytes, 1000);
  EXPECT_FALSE(t->slice_rows(0, 4).is_ok());
  EXPECT_FALSE(Tensor::packed(*buf, 100, p).is_ok());  // 100 + 1000 > 1024
  EXPECT_FALSE(Tensor::empty(DType::gq, {8, 256}).is_ok());
}
