// The default model against independent implementations (golden files from tests/gen):
//  - dequantized f32 path vs Hugging Face transformers: last-position logits NMSE <= 1e-6 for 8
//    prompts, 64 greedy tokens identical for 4 prompts;
//  - native Q4_1 path vs llama.cpp: same prompt token ids, logits NMSE and max |diff| reported and
//    bounded, greedy continuations compared.
// Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-model.sh); skipped without it
// unless CI is set, where its absence is a failure.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lithe/core/file_util.h"
#include "lithe/kernels/cpu.h"
#include "lithe/models/model.h"

using namespace lithe;

namespace {

std::string model_path() {
  if (const char* p = std::getenv("LITHE_TEST_MODEL")) return p;
  return std::string(LITHE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool have_model() {
  if (std::filesystem::exists(model_path())) return true;
  if (std::getenv("CI") != nullptr) ADD_FAILURE() << model_path() << " is missing: run scripts/fetch-model.sh";
  return false;
}

nlohmann::json read_json(const std::string& name) {
  auto t = read_text_file(std::string(LITHE_TEST_DATA) + "/model/" + name);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return nlohmann::json::parse(*t);
}

std::vector<float> read_rows(const std::string& name) {
  std::ifstream f(std::string(LITHE_TEST_DATA) + "/model/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  std::vector<float> out;
  f.seekg(0, std::ios::end);
  const auto bytes = static_cast<size_t>(f.tellg());
  out.resize(bytes / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
  return out;
}

struct Compare {
  double nmse = 0, max_abs = 0;
  bool same_argmax = false;
};

Compare compare(const float* got, const float* want, size_t n) {
  Compare c;
  double num = 0, den = 0;
  size_t ag = 0, aw = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    c.max_abs = std::max(c.max_abs, std::abs(d));
    if (got[i] > got[ag]) ag = i;
    if (want[i] > want[aw]) aw = i;
  }
  c.nmse = num / den;
  c.same_argmax = ag == aw;
  return c;
}

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

std::vector<int32_t> greedy(Model& m, const std::vector<int32_t>& prompt, int n) {
  auto cache = m.new_cache(static_cast<int64_t>(prompt.size()) + n + 1);
  EXPECT_TRUE(cache.is_ok());
  std::vector<float> logits;
  EXPECT_TRUE(m.forward(*cache, prompt, false, logits).is_ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    EXPECT_TRUE(m.forward(*cache, std::span<const int32_t>(&t, 1), false, logits).is_ok());
  }
  return out;
}

void check_logits(Model& m, const nlohmann::json& golden, const std::vector<float>& rows, double max_nmse,
                  const char* label) {
  const size_t vocab = static_cast<size_t>(m.config().vocab_size);
  ASSERT_EQ(rows.size(), golden["logits"].size() * vocab);
  double worst_nmse = 0, worst_abs = 0;
  for (size_t i = 0; i < golden["logits"].size(); ++i) {
    const auto& g = golden["logits"][i];
    auto cache = m.new_cache(256);
    ASSERT_TRUE(cache.is_ok());
    std::vector<float> logits;
    ASSERT_TRUE(m.forward(*cache, ids_of(g["ids"]), false, logits).is_ok());
    const Compare c = compare(logits.data(), rows.data() + i * vocab, vocab);
    worst_nmse = std::max(worst_nmse, c.nmse);
    worst_abs = std::max(worst_abs, c.max_abs);
    EXPECT_LE(c.nmse, max_nmse) << label << " prompt " << i << ": " << g["prompt"];
    EXPECT_TRUE(c.same_argmax) << label << " prompt " << i;
    std::printf("%s prompt %zu: NMSE %.3e  max|diff| %.3e  argmax %s\n", label, i, c.nmse, c.max_abs,
                c.same_argmax ? "equal" : "DIFFERENT");
  }
  std::printf("%s: worst NMSE %.3e, worst max|diff| %.3e\n", label, worst_nmse, worst_abs);
}

}  // namespace

TEST(ModelGolden, DequantizedF32MatchesTransformers) {
  if (!have_model()) GTEST_SKIP() << "default model not present";
  LoadOptions lo;
  lo.dequantize = true;
  auto m = Model::load(model_path(), lo);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const auto golden = read_json("hf_f32.json");
  check_logits(**m, golden, read_rows("hf_f32_logits.bin"), 1e-6, "f32 vs transformers");
  for (const auto& g : golden["greedy"]) {
    const auto want = ids_of(g["tokens"]);
    EXPECT_EQ(greedy(**m, ids_of(g["ids"]), static_cast<int>(want.size())), want) << g["prompt"];
  }
}

TEST(ModelGolden, NativeQ4_1MatchesLlamaCpp) {
  if (!have_model()) GTEST_SKIP() << "default model not present";
  auto m = Model::load(model_path());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const auto golden = read_json("llamacpp_q4_1.json");
  // Tokenization: lithe's ids equal llama.cpp's for every prompt (special tokens parsed).
  EncodeOptions eo;
  eo.parse_special = true;
  for (const auto& g : golden["logits"]) {
    auto ids = (*m)->tokenizer().encode(g["prompt"].get<std::string>(), eo);
    ASSERT_TRUE(ids.is_ok());
    EXPECT_EQ(*ids, ids_of(g["ids"])) << g["prompt"];
  }
  // Logits: llama.cpp rounds activations to 8 bits per block inside its dot products, as lithe
  // does, but its rounding points differ (f16 KV cache, q8_1 sums): llama.cpp's own Q4_1 logits
  // are 5e-5..5e-3 NMSE away from the exact f32 forward of the same weights (transformers), so
  // the bound is set at that noise level, and both distances are printed.
  check_logits(**m, golden, read_rows("llamacpp_q4_1_logits.bin"), 2e-2, "q4_1 vs llama.cpp");
  check_logits(**m, read_json("hf_f32.json"), read_rows("hf_f32_logits.bin"), 2e-2, "q4_1 vs f32 transformers");
  int identical = 0;
  for (const auto& g : golden["greedy"]) {
    const auto want = ids_of(g["tokens"]);
    const auto got = greedy(**m, ids_of(g["ids"]), static_cast<int>(want.size()));
    size_t same = 0;
    while (same < want.size() && got[same] == want[same]) ++same;
    std::printf("greedy vs llama.cpp: first %zu of %zu tokens identical\n", same, want.size());
    identical += same == want.size();
    // Not required to be identical: llama.cpp's own f32 reference (transformers) already departs
    // from its Q4_1 continuations after 3-17 tokens at near-tied logits; the first must agree.
    EXPECT_GE(same, 1u) << g["prompt"];
  }
  std::printf("greedy continuations identical to llama.cpp: %d of %zu\n", identical, golden["greedy"].size());
}

// LoadOptions::batch_layouts (the server's): the linears and the head get the CPU kernels' batch
// layout, and a prompt's logits (its prefill: the matrix-matrix path) keep every bit.
TEST(ModelGolden, BatchLayoutsKeepEveryLogit) {
  if (!have_model()) GTEST_SKIP() << "default model not present";
  LoadOptions lo;
  lo.batch_layouts = true;
  auto plain = Model::load(model_path()), laid = Model::load(model_path(), lo);
  ASSERT_TRUE(plain.is_ok() && laid.is_ok());
  const ModelWeights& w = (*laid)->weights();
  const bool kernels_pack = cpu::active_isa() != cpu::Isa::scalar;
  EXPECT_EQ(kernels_pack, w.output.batch_layout() != nullptr);
  EXPECT_EQ(kernels_pack, w.layers.back().w_down.batch_layout() != nullptr);
  EXPECT_EQ(nullptr, w.tok_embd.batch_layout());  // the embedding is read by rows, not multiplied
  const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649, 314, 28, 3, 17, 16, 1040, 42};
  std::vector<float> a, b;
  auto ca = (*plain)->new_cache(64), cb = (*laid)->new_cache(64);
  ASSERT_TRUE((*plain)->forward(*ca, prompt, true, a).is_ok());
  ASSERT_TRUE((*laid)->forward(*cb, prompt, true, b).is_ok());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST(ModelGolden, BatchedSequencesMatchSeparateRuns) {
  if (!have_model()) GTEST_SKIP() << "default model not present";
  auto m = Model::load(model_path());
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const std::vector<int32_t> a = {504, 3458, 282, 4649, 314}, b = {1, 28, 3, 17, 16, 1040, 42};
  std::vector<float> la, lb, lab;
  auto ca = (*m)->new_cache(64), cb = (*m)->new_cache(64), cab = (*m)->new_cache(64), cbb = (*m)->new_cache(64);
  ASSERT_TRUE((*m)->forward(*ca, a, false, la).is_ok());
  ASSERT_TRUE((*m)->forward(*cb, b, true, lb).is_ok());
  std::vector<int32_t> pa(a.size()), pb(b.size());
  for (size_t i = 0; i < pa.size(); ++i) pa[i] = static_cast<int32_t>(i);
  for (size_t i = 0; i < pb.size(); ++i) pb[i] = static_cast<int32_t>(i);
  const SequenceInput batch[2] = {{&*cab, a, pa, false}, {&*cbb, b, pb, true}};
  ASSERT_TRUE((*m)->forward(batch, lab).is_ok());
  const size_t vocab = static_cast<size_t>((*m)->config().vocab_size);
  ASSERT_EQ(lab.size(), (1 + b.size()) * vocab);
  // The same math over more rows: activation rounding is per row, so results agree to f32 noise.
  const Compare first = compare(lab.data(), la.data(), vocab);
  const Compare rest = compare(lab.data() + vocab, lb.data(), b.size() * vocab);
  EXPECT_LT(first.nmse, 1e-8);
  EXPECT_LT(rest.nmse, 1e-8);
  EXPECT_TRUE(first.same_argmax && rest.same_argmax);
  // The caches hold the same positions afterwards and continue identically.
  EXPECT_EQ(cab->size(), ca->size());
  EXPECT_EQ(cbb->size(), cb->size());
}
