// Synthetic models (random weights of a given shape) and the shapes of the named presets.
#include <gtest/gtest.h>

#include <cmath>

#include "lithe/models/model.h"

using namespace lithe;

TEST(Synthetic, PresetsHaveTheirPublishedShapes) {
  auto c = synthetic_config("llama2-7b");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->d_model, 4096);
  EXPECT_EQ(c->d_ff, 11008);
  EXPECT_EQ(c->vocab_size, 32000);
  auto l3 = synthetic_config("llama3-8b");
  ASSERT_TRUE(l3.is_ok());
  EXPECT_EQ(l3->n_kv_heads, 8);
  EXPECT_EQ(l3->vocab_size, 128256);
  auto l13 = synthetic_config("llama2-13b");
  ASSERT_TRUE(l13.is_ok());
  EXPECT_EQ(l13->d_model, 5120);
  auto bad = synthetic_config("llama9-1t");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("llama9-1t"), std::string::npos);
}

TEST(Synthetic, SmallModelRunsOnCpuWithFiniteLogits) {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2, c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.d_ff = 96;
  c.vocab_size = 100, c.rope_dim = 16;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    auto m = Model::synthetic(c, dt, Device::cpu, 3);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_FALSE((*m)->has_tokenizer());
    auto cache = (*m)->new_cache(32);
    ASSERT_TRUE(cache.is_ok());
    const std::vector<int32_t> ids = {1, 2, 3, 99};
    std::vector<float> logits;
    ASSERT_TRUE((*m)->forward(*cache, ids, false, logits).is_ok());
    ASSERT_EQ(logits.size(), 100u);
    double norm = 0;
    for (float x : logits) {
      ASSERT_TRUE(std::isfinite(x));
      norm += x * x;
    }
    EXPECT_GT(norm, 0);
    // Only the top-k leave the backend; they are the k largest logits of the full row.
    std::vector<float> vals;
    std::vector<int32_t> top;
    cache->clear();
    ASSERT_TRUE((*m)->forward_top_k(*cache, ids, 3, vals, top).is_ok());
    ASSERT_EQ(top.size(), 3u);
    EXPECT_EQ(top[0], std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_EQ(vals[0], logits[static_cast<size_t>(top[0])]);
    EXPECT_GE(vals[0], vals[1]);
    EXPECT_GE(vals[1], vals[2]);
  }
  EXPECT_FALSE(Model::synthetic(c, DType::q4_0, Device::cpu).is_ok());
}
