// lithe serve's parts without HTTP: TextStream (stop strings while streaming),
// OpenAI request parsing, metrics text, and the Engine on the default model (batched greedy text
// equals solo text, also through preemption; cancellation frees the blocks), and sample_token's draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "lithe/decode/text_stream.h"
#include "lithe/kernels/cpu.h"
#include "lithe/serve/api.h"
#include "lithe/serve/engine.h"
#include "lithe/serve/metrics.h"
#include "lithe/serve/sampling.h"

namespace lithe::serve {
namespace {

std::string model_path() { return std::string(LITHE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }
bool have_model() { return std::filesystem::exists(model_path()); }

class ServeModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_model()) return;
    auto m = Model::load(model_path());
    ASSERT_TRUE(m) << m.status().to_string();
    model_ = std::move(*m).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!have_model()) GTEST_SKIP() << "default model not present";
  }
  static GenRequest greedy(const std::string& prompt, int64_t n) {
    GenRequest r;
    r.prompt = *model_->tokenizer().encode(prompt);
    r.max_tokens = n;
    r.sampling.temperature = 0;
    return r;
  }
  // Runs the requests at once; returns each one's text and finish reason.
  static std::vector<std::string> run_all(Engine& e, const std::vector<GenRequest>& reqs) {
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& r : reqs) hs.push_back(*e.submit(r));
    std::vector<std::string> out;
    for (auto& h : hs) {
      std::string text;
      Event ev;
      do {
        EXPECT_TRUE(h->next(ev, std::chrono::seconds(300)));
        text += ev.text;
      } while (!ev.done);
      out.push_back(text + "|" + ev.finish_reason);
    }
    return out;
  }
  // An engine over its own KV pool.
  struct Running {
    Running(Model& m, const EngineOptions& o) : engine(m, o, metrics, *Engine::make_pool(m, o)) {}
    Metrics metrics;
    Engine engine;
  };
  static Model* model_;
};
Model* ServeModel::model_ = nullptr;

TEST_F(ServeModel, TextStreamHoldsBackAndCutsStopStrings) {
  const Tokenizer& tok = model_->tokenizer();
  auto ids = *tok.encode("one, two, three, four");
  TextStream plain(tok, {});
  std::string all;
  for (int32_t id : ids) all += plain.feed(id)->text;
  all += plain.flush();
  EXPECT_EQ(all, "one, two, three, four");
  TextStream stop(tok, {", thr"});
  std::string cut;
  bool stopped = false;
  for (int32_t id : ids) {
    auto p = *stop.feed(id);
    cut += p.text;
    for (const char* prefix : {",", ", ", ", t", ", th"})  // held back: could still become the stop string
      EXPECT_FALSE(cut.ends_with(prefix)) << cut;
    if ((stopped = p.stopped)) break;
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(cut, "one, two");
}

TEST_F(ServeModel, BatchedGreedyEqualsSoloAlsoWithPreemption) {
  std::vector<GenRequest> reqs = {greedy("The capital of France is", 12), greedy("Once upon a time", 12),
                                  greedy("1, 2, 3, 4,", 12), greedy("Water boils at", 12)};
  // The CPU kernels sum every output in one order whatever the batch (batch invariance), so a
  // sequence batched with others gets the tokens it gets alone.
  Running solo_engine(*model_, EngineOptions{});
  std::vector<std::string> solo;
  for (const auto& r : reqs) solo.push_back(run_all(solo_engine.engine, {r})[0]);
  EXPECT_NE(solo[0].find("Paris"), std::string::npos) << solo[0];

  EngineOptions small;  // 6 blocks of 4 tokens: four sequences of ~17 tokens must take turns
  small.block_size = 4;
  small.kv_blocks = 6;
  small.batch_tokens = 8;  // and prompts are prefilled in chunks
  Running batched(*model_, small);
  EXPECT_EQ(run_all(batched.engine, reqs), solo);
  EXPECT_GT(batched.metrics.preemptions.load(), 0u);
  EXPECT_EQ(batched.metrics.kv_blocks_free.load(), 6);
}

TEST_F(ServeModel, CancelledRequestFinishesAndFreesItsBlocks) {
  Running r(*model_, EngineOptions{});
  Metrics& m = r.metrics;
  auto h = *r.engine.submit(greedy("Once upon a time", 500));
  Event ev;
  ASSERT_TRUE(h->next(ev, std::chrono::seconds(60)));
  h->cancel();
  while (!ev.done) ASSERT_TRUE(h->next(ev, std::chrono::seconds(60)));
  EXPECT_EQ(ev.finish_reason, "cancelled");
  EXPECT_LT(ev.completion_tokens, 500);
  EXPECT_EQ(m.cancelled.load(), 1u);
  EXPECT_EQ(m.kv_blocks_free.load(), m.kv_blocks_total.load());
}

TEST_F(ServeModel, RequestsThatCannotFitAreRefused) {
  EngineOptions o;
  o.ctx = 64;
  Running run(*model_, o);
  Engine& e = run.engine;
  GenRequest r = greedy("hello", 100);
  Status st = e.check(r);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("context is 64 tokens"), std::string::npos) << st.message();
  r.prompt.clear();
  r.max_tokens = 1;
  EXPECT_FALSE(e.check(r).is_ok());
}

ApiRequest parse_ok(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, "m");
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::get<ApiRequest>(r);
}

ApiError parse_err(Endpoint ep, const std::string& body) {
  auto r = parse_request(ep, body, "m");
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(ServeApi, ParsesOpenAIFields) {
  auto r = parse_ok(Endpoint::completions,
                    R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0.5,"top_p":0.9,"stop":"x","seed":3,)"
                    R"("presence_penalty":0.1,"frequency_penalty":-0.2,"logprobs":2,"n":1,"stream":true,)"
                    R"("stream_options":{"include_usage":true},"user":"ignored"})");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_EQ(r.gen.sampling.seed, 3u);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.gen.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);
  auto ids = parse_ok(Endpoint::completions, R"({"model":"m","prompt":[1,2,3]})");
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ids.gen.top_logprobs, -1);
  auto c = parse_ok(Endpoint::chat, R"({"model":"m","messages":[{"role":"developer","content":"be brief"},)"
                                    R"({"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],)"
                                    R"("logprobs":true,"top_logprobs":3,"max_completion_tokens":7})");
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[0].role, "system");
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.gen.top_logprobs, 3);
  EXPECT_EQ(c.max_tokens, 7);
}

TEST(ServeApi, ErrorsNameTheParameter) {
  EXPECT_EQ(parse_err(Endpoint::completions, "{").code, "invalid_json");
  EXPECT_EQ(parse_err(Endpoint::completions, R"({"model":"x","prompt":"a"})").status, 404);
  EXPECT_EQ(parse_err(Endpoint::completions, R"({"model":"m","prompt":"a","max_tokens":1.5})").param, "max_tokens");
  EXPECT_EQ(parse_err(Endpoint::completions, R"({"model":"m","prompt":"a","n":2})").code, "unsupported_value");
  EXPECT_EQ(parse_err(Endpoint::completions, R"({"model":"m","prompt":"a","seed":"s"})").param, "seed");
  EXPECT_EQ(parse_err(Endpoint::completions, R"({"model":"m","prompt":"a","stop":["a","b","c","d","e"]})").param,
            "stop");
  EXPECT_EQ(parse_err(Endpoint::chat, R"({"model":"m","messages":[{"content":"x"}]})").param, "messages[0].role");
  EXPECT_EQ(parse_err(Endpoint::chat, R"({"model":"m","messages":[{"role":"user"}]})").param, "messages[0].content");
  const auto j = parse_err(Endpoint::completions, "[]").to_json();
  EXPECT_TRUE(j["error"].contains("message") && j["error"]["param"].is_null() && j["error"]["type"].is_string());
}

TEST(ServeApi, JsonOfInvalidUtf8IsStillJson) {
  EXPECT_EQ(dump(nlohmann::json("a\xff")), "\"a\xEF\xBF\xBD\"");
}

// Draws from sample_token against the tempered softmax computed in double: each token's frequency
// within 5 standard deviations of its probability, over a vocabulary of many blocks whose likely
// tokens sit at block edges and in the last, partial block; top_p keeps only the nucleus.
TEST(ServeSampling, DrawsFollowTheTemperedDistribution) {
  const int64_t vocab = 3 * cpu::kSoftmaxBlock + 17;
  std::vector<float> logits(static_cast<size_t>(vocab), -4.0f);
  const std::vector<std::pair<int32_t, float>> likely = {{0, 2.0f},   {255, 1.5f},  {256, 1.0f},
                                                         {511, 0.5f}, {700, 1.8f}, {static_cast<int32_t>(vocab - 1), 1.2f}};
  for (auto [id, l] : likely) logits[static_cast<size_t>(id)] = l;
  for (float top_p : {1.0f, 0.7f}) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_p = top_p;
    std::vector<double> prob(logits.size());
    double z = 0;
    for (size_t i = 0; i < logits.size(); ++i) z += prob[i] = std::exp(static_cast<double>(logits[i]) / p.temperature);
    for (double& q : prob) q /= z;
    if (top_p < 1.0f) {  // the nucleus: most likely first until the mass reaches top_p
      std::vector<size_t> ids(prob.size());
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
      std::stable_sort(ids.begin(), ids.end(), [&](size_t a, size_t b) { return prob[a] > prob[b]; });
      double mass = 0, kept = 0;
      size_t keep = 0;
      while (mass < top_p) mass += prob[ids[keep++]];
      for (size_t k = 0; k < keep; ++k) kept += prob[ids[k]];
      std::vector<double> nucleus(prob.size(), 0.0);
      for (size_t k = 0; k < keep; ++k) nucleus[ids[k]] = prob[ids[k]] / kept;
      prob = nucleus;
    }
    std::mt19937_64 rng(5);
    SampleScratch scratch;
    const int draws = 200000;
    std::vector<int> count(logits.size(), 0);
    for (int d = 0; d < draws; ++d) {
      std::vector<float> row = logits;
      const int32_t id = sample_token(row, p, {}, rng, scratch);
      ASSERT_TRUE(id >= 0 && id < vocab) << id;
      count[static_cast<size_t>(id)]++;
    }
    for (size_t i = 0; i < prob.size(); ++i) {
      const double want = prob[i] * draws, sd = std::sqrt(draws * prob[i] * (1 - prob[i]));
      ASSERT_NEAR(count[i], want, 5 * sd + 1e-9) << "token " << i << " top_p " << top_p;
    }
  }
}

TEST(ServeMetrics, PrometheusText) {
  Metrics m;
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 200);
  m.count_request("/v1/completions", 400);
  m.ttft.observe(0.02);
  m.ttft.observe(100);
  m.generated_tokens = 7;
  const std::string t = m.render();
  EXPECT_NE(t.find("lithe_requests_total{endpoint=\"/v1/completions\",code=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_requests_total{endpoint=\"/v1/completions\",code=\"400\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_generated_tokens_total 7\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_time_to_first_token_seconds_bucket{le=\"0.01\"} 0\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_time_to_first_token_seconds_bucket{le=\"60\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("lithe_time_to_first_token_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE lithe_batch_size histogram\n"), std::string::npos);
}

}  // namespace
}  // namespace lithe::serve
