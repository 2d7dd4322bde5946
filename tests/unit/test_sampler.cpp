// Sampler: greedy, top-k/top-p/min-p truncation, temperature, penalties, seeding, validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "lithe/decode/sampler.h"

using namespace lithe;

namespace {
std::vector<float> logits() { return {1.0f, 3.0f, 2.5f, -1.0f, 0.0f, 2.9f}; }
}  // namespace

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p);
  auto l = logits();
  EXPECT_EQ(s.sample(l, {}), 1);
}

TEST(Sampler, TopKOneIsGreedyAndSeedsReproduce) {
  SamplingParams p;
  p.temperature = 1.5f;
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 20; ++i) {
    auto l = logits();
    EXPECT_EQ(s.sample(l, {}), 1);
  }
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> ra, rb;
  for (int i = 0; i < 50; ++i) {
    auto l1 = logits(), l2 = logits();
    ra.push_back(a.sample(l1, {}));
    rb.push_back(b.sample(l2, {}));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_GT(std::set<int32_t>(ra.begin(), ra.end()).size(), 2u);  // it does sample
}

TEST(Sampler, TruncationKeepsOnlyAllowedTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;  // {1, 5, 2}
  p.top_p = 1;
  p.min_p = 0;
  Sampler s(p);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i) {
    auto l = logits();
    seen[s.sample(l, {})]++;
  }
  for (const auto& [id, n] : seen) EXPECT_TRUE(id == 1 || id == 5 || id == 2) << id;
  EXPECT_EQ(seen.size(), 3u);
  // min-p 0.9: only tokens within 90% of the top probability (1 and 5: e^-0.1 = 0.905).
  p.top_k = 0;
  p.min_p = 0.9f;
  Sampler m(p);
  for (int i = 0; i < 200; ++i) {
    auto l = logits();
    const int32_t id = m.sample(l, {});
    EXPECT_TRUE(id == 1 || id == 5) << id;
  }
  // top-p 0.3: the top token alone holds ~0.31 of the mass.
  p.min_p = 0;
  p.top_p = 0.3f;
  Sampler t(p);
  for (int i = 0; i < 100; ++i) {
    auto l = logits();
    EXPECT_EQ(t.sample(l, {}), 1);
  }
}

TEST(Sampler, PenaltiesDemoteRecentTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.repeat_penalty = 2.0f;  // 3.0 -> 1.5 for token 1
  Sampler s(p);
  auto l = logits();
  const std::vector<int32_t> hist = {1};
  EXPECT_EQ(s.sample(l, hist), 5);
  EXPECT_FLOAT_EQ(l[1], 1.5f);
  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.2f;
  auto l2 = logits();
  q.frequency_penalty = 0.1f;
  const std::vector<int32_t> hist2 = {1, 1, 1, 5};
  Sampler f2(q);
  EXPECT_EQ(f2.sample(l2, hist2), 5);  // 1: 3.0-0.3-0.2 = 2.5, 5: 2.9-0.1-0.2 = 2.6, 2: 2.5
  EXPECT_FLOAT_EQ(l2[1], 2.5f);
}

TEST(Sampler, ValidationNamesTheParameter) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  p.min_p = 2;
  EXPECT_NE(p.validate().message().find("min_p"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().is_ok());
}

TEST(Sampler, LogprobIsLogSoftmax) {
  const std::vector<float> l = {0.0f, std::log(3.0f)};
  EXPECT_NEAR(Sampler::logprob(l, 1), std::log(0.75), 1e-6);  // log(3) rounded to f32
}

// The device path hands the sampler only the k best logits: it must draw exactly what sample()
// draws from the whole row with the same seed (same candidates, same random stream).
TEST(Sampler, SampleTopEqualsSampleOnTheWholeRow) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int top_k : {1, 5, 40}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = top_k;
    p.seed = 77;
    Sampler full(p), top(p);
    ASSERT_EQ(full.candidates_needed(), top_k);
    for (int step = 0; step < 200; ++step) {
      std::vector<float> row(1000);
      for (float& x : row) x = nd(rng);
      row[10] = row[20] = 8.0f;  // a tie at the top
      std::vector<int32_t> order(row.size());
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      std::vector<float> vals;
      std::vector<int32_t> ids(order.begin(), order.begin() + top_k);
      for (int32_t i : ids) vals.push_back(row[static_cast<size_t>(i)]);
      EXPECT_EQ(top.sample_top(vals, ids), full.sample(row, {})) << "top_k " << top_k << " step " << step;
    }
  }
  SamplingParams pen;
  pen.repeat_penalty = 1.1f;
  EXPECT_EQ(Sampler(pen).candidates_needed(), 0);  // penalties need the whole row
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(Sampler(greedy).candidates_needed(), 1);
}
