// Decoding one step ahead (backend.h kArgmaxToken, Model::launch_top_k / fetch_top_k, generate()'s
// greedy loop): the token a queued step reads is the last top-k's argmax, launched results come back
// in order, and generate() ends every way (length, stop string, cancellation, full context) with the same tokens as a plain one-step-at-a-time loop and a cache that holds
// exactly its history (the step queued past the end given back).
#include <gtest/gtest.h>

#include <vector>

#include "lithe/decode/generate.h"
#include "lithe/models/model.h"
#include "test_tmp.h"

using namespace lithe;

namespace {

std::unique_ptr<Model> tiny() {
  auto m = Model::load(lithe_test::tiny_model_dir("llama3"));
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m ? std::move(*m) : nullptr;
}

std::vector<int32_t> prompt_ids(const Model& m) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % m.config().vocab_size));
  return ids;
}

// The reference: n greedy tokens after `prompt`, one synchronous forward_top_k per token.
std::vector<int32_t> greedy_reference(Model& m, const std::vector<int32_t>& prompt, int n) {
  auto cache = m.new_cache(256);
  EXPECT_TRUE(cache.is_ok());
  std::vector<float> vals;
  std::vector<int32_t> ids, out;
  EXPECT_TRUE(m.forward_top_k(*cache, prompt, 1, vals, ids).is_ok());
  for (int i = 0; i < n; ++i) {
    out.push_back(ids[0]);
    EXPECT_TRUE(m.forward_top_k(*cache, std::span<const int32_t>(&out.back(), 1), 1, vals, ids).is_ok());
  }
  return out;
}

}  // namespace

TEST(DecodeAhead, ArgmaxTokenReadsTheLastTopK) {
  auto be = make_cpu_backend();
  auto table = Tensor::empty(DType::f32, {5, 3});
  ASSERT_TRUE(table.is_ok());
  for (int64_t i = 0; i < 15; ++i) table->data_as<float>()[i] = static_cast<float>(i);
  auto out = Tensor::empty(DType::f32, {2, 3});
  ASSERT_TRUE(out.is_ok());
  const int32_t ids[] = {kArgmaxToken, 1};
  // No top_k yet: the token has nothing to read.
  Status st = be->embedding(*table, ids, 2, *out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("argmax"), std::string::npos) << st.message();
  // Row 0's best id of a two-row top_k is 3.
  auto logits = Tensor::empty(DType::f32, {2, 5});
  ASSERT_TRUE(logits.is_ok());
  const float l[] = {0, 1, 2, 9, 4, 7, 0, 0, 0, 0};
  std::copy(l, l + 10, logits->data_as<float>());
  ASSERT_TRUE(be->top_k_launch(*logits, 2, 2).is_ok());
  ASSERT_TRUE(be->embedding(*table, ids, 2, *out).is_ok());
  EXPECT_EQ(out->data_as<float>()[0], 9.0f);  // table row 3
  EXPECT_EQ(out->data_as<float>()[3], 3.0f);  // table row 1
  std::vector<float> v;
  std::vector<int32_t> i;
  ASSERT_TRUE(be->top_k_fetch(v, i).is_ok());
  EXPECT_EQ(i, (std::vector<int32_t>{3, 4, 0, 1}));
  EXPECT_EQ(v, (std::vector<float>{9, 4, 7, 0}));
  // Nothing left to fetch; at most kTopKInFlight launches wait.
  EXPECT_FALSE(be->top_k_fetch(v, i).is_ok());
  for (size_t n = 0; n < Backend::kTopKInFlight; ++n) ASSERT_TRUE(be->top_k_launch(*logits, 1, 1).is_ok());
  EXPECT_FALSE(be->top_k_launch(*logits, 1, 1).is_ok());
  // A synchronous top_k drops what waits.
  float tv[2];
  int32_t ti[2];
  ASSERT_TRUE(be->top_k(*logits, 1, 2, tv, ti).is_ok());
  EXPECT_FALSE(be->top_k_fetch(v, i).is_ok());
}

TEST(DecodeAhead, LaunchedStepsEqualOneStepAtATime) {
  auto m = tiny();
  ASSERT_TRUE(m);
  const auto prompt = prompt_ids(*m);
  const auto want = greedy_reference(*m, prompt, 20);
  auto cache = m->new_cache(256);
  ASSERT_TRUE(cache.is_ok());
  std::vector<float> vals;
  std::vector<int32_t> ids, got;
  ASSERT_TRUE(m->launch_top_k(*cache, prompt, 1).is_ok());
  const int32_t next = kArgmaxToken;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(m->launch_top_k(*cache, std::span<const int32_t>(&next, 1), 1).is_ok());  // before the fetch
    ASSERT_TRUE(m->fetch_top_k(vals, ids).is_ok());
    got.push_back(ids[0]);
  }
  ASSERT_TRUE(m->fetch_top_k(vals, ids).is_ok());
  EXPECT_EQ(got, want);
  EXPECT_EQ(cache->size(), static_cast<int64_t>(prompt.size()) + 20);
}

TEST(DecodeAhead, GenerateEndsEveryWayLikeTheReference) {
  auto m = tiny();
  ASSERT_TRUE(m);
  const auto prompt = prompt_ids(*m);
  const auto want = greedy_reference(*m, prompt, 24);
  GenerateOptions go;
  go.sampling.temperature = 0;
  go.stop_at_eog = false;
  // The cache holds exactly the prompt and every generated token but the last (never run).
  auto check = [&](const GenerateResult& r, KvCache& cache, const std::vector<int32_t>& history, size_t n,
                   const char* reason) {
    EXPECT_EQ(r.finish_reason, reason);
    ASSERT_EQ(r.tokens.size(), n) << reason;
    EXPECT_TRUE(std::equal(r.tokens.begin(), r.tokens.end(), want.begin())) << reason;
    EXPECT_EQ(cache.size(), static_cast<int64_t>(prompt.size() + n - 1)) << reason;
    EXPECT_EQ(static_cast<int64_t>(history.size()), cache.size()) << reason;
  };
  {  // length; then the same cache continues the stream exactly (the dropped step left no trace)
    auto cache = m->new_cache(256);
    std::vector<int32_t> history;
    go.max_tokens = 10;
    auto r = generate(*m, *cache, history, prompt, go);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    check(*r, *cache, history, 10, "length");
    std::vector<int32_t> more = prompt;
    more.insert(more.end(), want.begin(), want.begin() + 10);
    auto r2 = generate(*m, *cache, history, more, go);
    ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
    EXPECT_EQ(r2->prompt_tokens, 1);
    EXPECT_TRUE(std::equal(r2->tokens.begin(), r2->tokens.end(), want.begin() + 10));
  }
  go.max_tokens = 24;
  {  // cancelled by the text callback after 5 pieces
    auto cache = m->new_cache(256);
    std::vector<int32_t> history;
    int pieces = 0;
    auto r = generate(*m, *cache, history, prompt, go, [&](std::string_view) { return ++pieces < 5; });
    ASSERT_TRUE(r.is_ok());
    ASSERT_EQ(r->finish_reason, "cancelled");
    check(*r, *cache, history, r->tokens.size(), "cancelled");
  }
  {  // a stop string: the text of reference tokens 4..5
    auto text = m->tokenizer().decode(std::vector<int32_t>(want.begin() + 4, want.begin() + 6));
    ASSERT_TRUE(text.is_ok());
    ASSERT_FALSE(text->empty());
    auto cache = m->new_cache(256);
    std::vector<int32_t> history;
    GenerateOptions g = go;
    g.stop = {*text};
    auto r = generate(*m, *cache, history, prompt, g);
    ASSERT_TRUE(r.is_ok());
    ASSERT_EQ(r->finish_reason, "stop");
    EXPECT_LE(r->tokens.size(), 6u);
    check(*r, *cache, history, r->tokens.size(), "stop");
  }
  {  // the context fills: 9 prompt tokens in 16 slots
    auto cache = m->new_cache(16);
    std::vector<int32_t> history;
    auto r = generate(*m, *cache, history, prompt, go);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->finish_reason, "context");
    EXPECT_EQ(cache->size(), 16);
    EXPECT_EQ(r->tokens.size(), 8u);
    EXPECT_TRUE(std::equal(r->tokens.begin(), r->tokens.end(), want.begin()));
  }
}
