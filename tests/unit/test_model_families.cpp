// Each registered architecture family against Hugging Face transformers on a tiny random
// checkpoint (tests/gen/gen_tiny_models.py): llama with llama3 RoPE scaling and an untied head,
// mistral, qwen2 with q/k/v biases and tied embeddings. Loaded from a checkpoint directory
// (safetensors, f16 weights, rotate-half RoPE); last-position logits NMSE <= 1e-6.
#include <gtest/gtest.h>

#include <cmath>

#include "test_tmp.h"
#include <nlohmann/json.hpp>

#include <filesystem>

#include "lithe/core/file_util.h"
#include "lithe/models/model.h"

using namespace lithe;
namespace fs = std::filesystem;

namespace {

class ModelFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelFamily, MatchesTransformers) {
  const fs::path data = fs::path(LITHE_TEST_DATA) / "tiny";
  const fs::path dir = lithe_test::tmp_path(std::string("tiny_") + GetParam());
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(data / GetParam())) fs::copy_file(e.path(), dir / e.path().filename());
  for (const auto& e : fs::directory_iterator(data / "tokenizer")) fs::copy_file(e.path(), dir / e.path().filename());
  auto m = Model::load(dir.string());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ((*m)->config().arch, GetParam() == std::string("llama3") ? "llama" : GetParam());
  const auto golden = nlohmann::json::parse(*read_text_file((dir / "golden.json").string()));
  const auto ids = golden["ids"].get<std::vector<int32_t>>();
  const auto want = golden["last_logits"].get<std::vector<float>>();
  auto cache = (*m)->new_cache(64);
  ASSERT_TRUE(cache.is_ok());
  std::vector<float> got;
  ASSERT_TRUE((*m)->forward(*cache, ids, false, got).is_ok());
  ASSERT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  std::printf("%s: NMSE %.3e\n", GetParam(), num / den);
  EXPECT_LE(num / den, 1e-6);
  EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(), golden["argmax"].back().get<long>());

  // forward_logprobs (what perplexity uses) equals log-softmax of every row of forward's logits.
  const int64_t vocab = (*m)->config().vocab_size;
  std::vector<int32_t> targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) targets[i] = i + 1 < ids.size() ? ids[i + 1] : -1;
  std::vector<float> all, lp;
  cache->clear();
  ASSERT_TRUE((*m)->forward(*cache, ids, true, all).is_ok());
  cache->clear();
  ASSERT_TRUE((*m)->forward_logprobs(*cache, ids, targets, lp).is_ok());
  ASSERT_EQ(lp.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const float* row = all.data() + static_cast<int64_t>(i) * vocab;
    double sum = 0;
    const float mx = *std::max_element(row, row + vocab);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    const double want_lp = targets[i] < 0 ? 0.0 : row[targets[i]] - mx - std::log(sum);
    EXPECT_NEAR(lp[i], want_lp, 1e-5) << "row " << i;
  }
  EXPECT_FALSE((*m)->forward_logprobs(*cache, ids, std::vector<int32_t>(1, 0), lp).is_ok());  // sizes differ
  targets[0] = static_cast<int32_t>(vocab);
  cache->clear();
  const Status bad = (*m)->forward_logprobs(*cache, ids, targets, lp);
  EXPECT_NE(bad.message().find("outside the vocabulary"), std::string::npos) << bad.to_string();
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamily, ::testing::Values("llama3", "mistral", "qwen2"));

}  // namespace
