// The calibration side of the compression pipeline: random windows, the block-wise runner
// (Model::block_forward must equal Model::forward), the site observer, and compress_model on the
// tiny llama checkpoint (RTN 8-bit barely moves the logits; GPTQ beats RTN at 4 bits), plus a
// real-layer check on the default model when models/ and data/ have it; X on the device, in host
// memory or on disk gives the same bits.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "lithe/quantize/calibration.h"
#include "lithe/quantize/pipeline.h"
#include "lithe/core/file_util.h"
#include "lithe/models/model.h"

using namespace lithe;
using namespace lithe::compress;
namespace fs = std::filesystem;

namespace {

// The tiny llama3 checkpoint with the test tokenizer, in a temporary directory.
std::string tiny_dir() {
  static const std::string dir = [] {
    const fs::path data = fs::path(LITHE_TEST_DATA) / "tiny";
    const fs::path d = lithe_test::tmp_path("pipeline_tiny");
    fs::remove_all(d);
    fs::create_directories(d);
    for (const char* sub : {"llama3", "tokenizer"})
      for (const auto& e : fs::directory_iterator(data / sub)) fs::copy_file(e.path(), d / e.path().filename());
    return d.string();
  }();
  return dir;
}

std::unique_ptr<Model> load_tiny() {
  LoadOptions o;
  o.dequantize = true;
  auto m = Model::load(tiny_dir(), o);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? std::move(*m) : nullptr;
}

const std::string kText =
    "Mr. Speaker, Mr. Vice President, members of Congress, and my fellow citizens: the state of our "
    "union is strong. We have come through hard years together, and the work ahead asks more of us. "
    "Tonight I want to talk about jobs, about schools, about the debts we owe and the promises we keep. ";

std::string calib_text(int repeats) {
  std::string s;
  for (int i = 0; i < repeats; ++i) s += kText;
  return s;
}

// Logits of every position from the final hidden states x [m, d_model] (host f32 head).
std::vector<float> head_logits(const Model& m, const float* x, int64_t rows) {
  const ModelConfig& c = m.config();
  const float* g = m.weights().out_norm.data_as<float>();
  const float* w = m.weights().output.data_as<float>();
  std::vector<float> out(static_cast<size_t>(rows * c.vocab_size));
  std::vector<float> h(static_cast<size_t>(c.d_model));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < c.d_model; ++i) ss += static_cast<double>(x[r * c.d_model + i]) * x[r * c.d_model + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.d_model) + c.rms_eps);
    for (int64_t i = 0; i < c.d_model; ++i)
      h[static_cast<size_t>(i)] = static_cast<float>(x[r * c.d_model + i] * inv) * g[i];
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      double s = 0;
      for (int64_t i = 0; i < c.d_model; ++i) s += static_cast<double>(w[v * c.d_model + i]) * h[static_cast<size_t>(i)];
      out[static_cast<size_t>(r * c.vocab_size + v)] = static_cast<float>(s);
    }
  }
  return out;
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& ids) {
  auto cache = m.new_cache(static_cast<int64_t>(ids.size()));
  EXPECT_TRUE(cache.is_ok());
  std::vector<float> logits;
  EXPECT_TRUE(m.forward(*cache, ids, true, logits).is_ok());
  return logits;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return num / den;
}

TEST(CalibrationWindows, DeterministicPerSeed) {
  std::vector<int32_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(i);
  auto a = calibration_windows(std::span<const int32_t>(toks), 16, 64, 7);
  auto b = calibration_windows(std::span<const int32_t>(toks), 16, 64, 7);
  auto c = calibration_windows(std::span<const int32_t>(toks), 16, 64, 8);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  ASSERT_EQ(a->size(), 16u);
  for (const auto& w : *a) {  // consecutive tokens from a start in [0, n - seqlen]
    ASSERT_EQ(w.size(), 64u);
    EXPECT_LE(w.front(), 1000 - 64);
    for (size_t i = 1; i < w.size(); ++i) EXPECT_EQ(w[i], w[i - 1] + 1);
  }
  // The whole text fits exactly once: every window is the text.
  auto whole = calibration_windows(std::span<const int32_t>(toks), 3, 1000, 1);
  ASSERT_TRUE(whole.is_ok());
  for (const auto& w : *whole) EXPECT_EQ(w, toks);
}

TEST(CalibrationWindows, RandomTokenIdsForSyntheticModels) {
  auto a = random_token_windows(100, 3, 17, 5), b = random_token_windows(100, 3, 17, 5);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*a, *b);
  ASSERT_EQ(a->size(), 3u);
  for (const auto& w : *a) {
    ASSERT_EQ(w.size(), 17u);
    for (int32_t t : w) EXPECT_TRUE(t >= 0 && t < 100);
  }
  EXPECT_NE(*a, *random_token_windows(100, 3, 17, 6));
  EXPECT_FALSE(random_token_windows(0, 3, 17, 5).is_ok());
  EXPECT_FALSE(random_token_windows(100, 0, 17, 5).is_ok());
}

TEST(CalibrationWindows, FromTextAndTooShort) {
  auto m = load_tiny();
  ASSERT_TRUE(m);
  const std::string text = calib_text(4);
  auto ids = m->tokenizer().encode(text);
  ASSERT_TRUE(ids.is_ok());
  auto w = calibration_windows(m->tokenizer(), text, 4, 32, 0);
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  for (const auto& win : *w) {  // each window is a substring of the one tokenization (no BOS)
    auto it = std::search(ids->begin(), ids->end(), win.begin(), win.end());
    EXPECT_NE(it, ids->end());
  }
  const auto n = static_cast<int64_t>(ids->size());
  auto bad = calibration_windows(m->tokenizer(), text, 5, n + 1, 0);
  ASSERT_FALSE(bad.is_ok());
  const std::string msg = bad.status().message();
  EXPECT_NE(msg.find(std::to_string(n) + " tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 windows"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(n + 1)), std::string::npos) << msg;
  EXPECT_FALSE(calibration_windows(m->tokenizer(), text, 0, 8, 0).is_ok());
}

TEST(BlockForward, ReproducesForward) {
  auto m = load_tiny();
  ASSERT_TRUE(m);
  auto ids = m->tokenizer().encode(kText);
  ASSERT_TRUE(ids.is_ok());
  ids->resize(40);
  const std::vector<float> want = all_logits(*m, *ids);
  Tensor x;
  ASSERT_TRUE(m->embed(*ids, x).is_ok());
  const auto rows = static_cast<int64_t>(ids->size());
  for (int64_t l = 0; l < m->config().n_layers; ++l) ASSERT_TRUE(m->block_forward(l, x, rows).is_ok());
  const std::vector<float> got = head_logits(*m, x.data_as<float>(), rows);
  ASSERT_EQ(got.size(), want.size());
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) max_abs = std::max(max_abs, std::abs(static_cast<double>(got[i]) - want[i]));
  EXPECT_LE(max_abs, 1e-5);
  // forward still works after block runs (the scratch cache is separate)
  EXPECT_EQ(all_logits(*m, *ids), want);
}

// The same on the default model (GGUF, interleaved RoPE, GQA 9/3, tied embeddings), 300 tokens.
TEST(BlockForward, ReproducesForwardOnDefaultModel) {
  const std::string path = std::string(LITHE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "needs " << path;
  LoadOptions lo;
  lo.dequantize = true;
  auto m = Model::load(path, lo);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto ids = (*m)->tokenizer().encode(calib_text(12));
  ASSERT_TRUE(ids.is_ok());
  ASSERT_GE(ids->size(), 300u);
  ids->resize(300);
  const std::vector<float> want = all_logits(**m, *ids);
  Tensor x;
  ASSERT_TRUE((*m)->embed(*ids, x).is_ok());
  const auto rows = static_cast<int64_t>(ids->size());
  for (int64_t l = 0; l < (*m)->config().n_layers; ++l) ASSERT_TRUE((*m)->block_forward(l, x, rows).is_ok());
  const std::vector<float> got = head_logits(**m, x.data_as<float>(), rows);
  ASSERT_EQ(got.size(), want.size());
  const double e = nmse(got, want);
  std::printf("default model, 300 tokens: block_forward chain vs forward logits NMSE %.3e\n", e);
  EXPECT_LE(e, 1e-8);
}

struct Seen {
  int64_t layer;
  LinearSite site;
  int64_t m, n_in;
};
class Recorder final : public LinearObserver {
 public:
  std::vector<Seen> seen;
  LinearSite stop_at = LinearSite::down;
  bool on_input(int64_t layer, LinearSite site, const Tensor& x, int64_t m) override {
    EXPECT_NE(x.data(), nullptr);
    EXPECT_EQ(x.device(), Device::cpu);
    EXPECT_GE(x.dim(0), m);
    seen.push_back({layer, site, m, x.dim(1)});
    return site != stop_at;
  }
};

TEST(BlockForward, ObserverSeesEverySite) {
  auto m = load_tiny();
  ASSERT_TRUE(m);
  const ModelConfig& c = m->config();
  const std::vector<int32_t> ids = {5, 17, 300, 42, 9, 1000, 77};
  Tensor x;
  ASSERT_TRUE(m->embed(ids, x).is_ok());
  Tensor x0 = *x.to(Device::cpu);
  Recorder rec;
  ASSERT_TRUE(m->block_forward(1, x, 7, &rec).is_ok());
  ASSERT_EQ(rec.seen.size(), 4u);
  const LinearSite sites[] = {LinearSite::qkv, LinearSite::o, LinearSite::gate_up, LinearSite::down};
  const int64_t widths[] = {c.d_model, c.q_dim(), c.d_model, c.d_ff};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rec.seen[i].layer, 1);
    EXPECT_EQ(rec.seen[i].site, sites[i]);
    EXPECT_EQ(rec.seen[i].m, 7);
    EXPECT_EQ(rec.seen[i].n_in, widths[i]);
  }
  Recorder stop;  // returning false stops the block at that site
  stop.stop_at = LinearSite::o;
  ASSERT_TRUE(m->block_forward(0, x0, 7, &stop).is_ok());
  EXPECT_EQ(stop.seen.size(), 2u);
  // linear_weight refuses a model whose weights are not f32 host tensors
  auto q = Model::load(tiny_dir());  // f16 safetensors kept as stored
  ASSERT_TRUE(q.is_ok());
  if ((*q)->weights().layers[0].wq.dtype() != DType::f32) {
    EXPECT_FALSE((*q)->linear_weight(0, LinearKind::q).is_ok());
  }
  EXPECT_TRUE(m->linear_weight(0, LinearKind::down).is_ok());
}

PipelineOptions small(CompressMethod method, int bits, int64_t group) {
  PipelineOptions o;
  o.method = method;
  o.grid.bits = bits;
  o.grid.group = group;
  o.progress = false;
  return o;
}

TEST(CompressModel, TinyRtnAndGptq) {
  auto ref = load_tiny();
  ASSERT_TRUE(ref);
  auto windows = calibration_windows(ref->tokenizer(), calib_text(6), 8, 48, 3);
  ASSERT_TRUE(windows.is_ok()) << windows.status().to_string();
  const std::vector<int32_t> probe((*windows)[0].begin(), (*windows)[0].begin() + 32);
  const std::vector<float> want = all_logits(*ref, probe);

  auto rtn8 = load_tiny();
  std::vector<CompressedLinearResult> r8;
  auto rep8 = compress_model(*rtn8, *windows, small(CompressMethod::rtn, 8, 0), r8);
  ASSERT_TRUE(rep8.is_ok()) << rep8.status().to_string();
  const int64_t n_lin = 7 * ref->config().n_layers;
  ASSERT_EQ(static_cast<int64_t>(r8.size()), n_lin);
  EXPECT_EQ(r8[0].name, "blk.0.attn_q");
  EXPECT_EQ(r8.back().name, "blk.1.ffn_down");
  const double e8 = nmse(all_logits(*rtn8, probe), want);
  std::printf("rtn 8-bit: logits NMSE %.3e, mean layer error %.3e, %.3f bits/w, X %llu bytes, %.3f s\n", e8,
              rep8->mean_error, rep8->avg_bits_per_weight, static_cast<unsigned long long>(rep8->activation_bytes),
              rep8->seconds);
  EXPECT_GT(e8, 0.0);
  EXPECT_LT(e8, 1e-3);
  EXPECT_EQ(rep8->activation_bytes, 8u * 48u * static_cast<uint64_t>(ref->config().d_model) * 4u);

  // 4 bits, groups of 16 (the tiny model's widths are 16 and 48).
  auto rtn4 = load_tiny();
  auto gq4 = load_tiny();
  std::vector<CompressedLinearResult> r4, g4;
  auto rep_r = compress_model(*rtn4, *windows, small(CompressMethod::rtn, 4, 16), r4);
  auto rep_g = compress_model(*gq4, *windows, small(CompressMethod::gptq, 4, 16), g4);
  ASSERT_TRUE(rep_r.is_ok() && rep_g.is_ok());
  std::printf("4-bit g16 total error: rtn %.4f, gptq %.4f (%.3f bits/w)\n", rep_r->total_error, rep_g->total_error,
              rep_g->avg_bits_per_weight);
  EXPECT_LT(rep_g->total_error, rep_r->total_error);
  EXPECT_NEAR(rep_g->avg_bits_per_weight, 4.0 + 32.0 / 16.0, 1e-9);
  for (const auto& r : g4) {
    ASSERT_TRUE(r.q.has_value()) << r.name;
    EXPECT_GE(r.error, 0.0);
  }
  EXPECT_LT(nmse(all_logits(*gq4, probe), want), nmse(all_logits(*rtn4, probe), want) * 2);
  // All four H of a block from one pass of the uncompressed block: also better than RTN, and not
  // the same as the true-sequential run (later sites see different inputs).
  auto gq4b = load_tiny();
  std::vector<CompressedLinearResult> g4b;
  PipelineOptions one_pass = small(CompressMethod::gptq, 4, 16);
  one_pass.true_sequential = false;
  auto rep_b = compress_model(*gq4b, *windows, one_pass, g4b);
  ASSERT_TRUE(rep_b.is_ok()) << rep_b.status().to_string();
  std::printf("gptq one pass per block: total error %.4f\n", rep_b->total_error);
  EXPECT_LT(rep_b->total_error, rep_r->total_error);
  EXPECT_EQ(g4b[0].q->codes, g4[0].q->codes);  // q of block 0 sees the same input either way
  EXPECT_NE(rep_b->total_error, rep_g->total_error);

  // SparseGPT 50%: half the weights are zero, masks recorded.
  auto sp = load_tiny();
  std::vector<CompressedLinearResult> rs;
  auto rep_s = compress_model(*sp, *windows, small(CompressMethod::sparsegpt, 4, 0), rs);
  ASSERT_TRUE(rep_s.is_ok()) << rep_s.status().to_string();
  EXPECT_NEAR(rep_s->sparsity, 0.5, 0.02);
  EXPECT_EQ(rs[0].mask.size(), static_cast<size_t>(rs[0].n_out * rs[0].n_in));

  // Refusals: no windows for gptq; a model not loaded with dequantize.
  std::vector<CompressedLinearResult> none;
  EXPECT_FALSE(compress_model(*ref, {}, small(CompressMethod::gptq, 4, 0), none).is_ok());
  auto stored = Model::load(tiny_dir());
  ASSERT_TRUE(stored.is_ok());
  if ((*stored)->weights().layers[0].wq.dtype() != DType::f32) {
    EXPECT_FALSE(compress_model(**stored, *windows, small(CompressMethod::rtn, 4, 0), none).is_ok());
  }
}

// PipelineOptions::sink_tokens: the first k rows of every window stay out of H. Checked through
// the reported error of blk.0.attn_q under RTN (whose result does not depend on H): it must equal
// tr(dW H dWᵀ) / tr(W H Wᵀ) with H = Σ over windows of X[k:]ᵀ X[k:], X the rows q_proj sees.
TEST(CompressModel, SinkTokensStayOutOfTheHessians) {
  auto ref = load_tiny();
  ASSERT_TRUE(ref);
  auto windows = calibration_windows(ref->tokenizer(), calib_text(6), 4, 24, 5);
  ASSERT_TRUE(windows.is_ok()) << windows.status().to_string();
  const int64_t n = ref->config().d_model;
  struct QkvRows final : LinearObserver {
    std::vector<float> rows;
    bool on_input(int64_t, LinearSite, const Tensor& x, int64_t m) override {
      rows.assign(x.data_as<float>(), x.data_as<float>() + m * x.dim(1));
      return false;  // only q_proj's input is wanted
    }
  };
  const Tensor w = *(*ref->linear_weight(0, LinearKind::q))->to(Device::cpu);
  for (const int64_t k : {0, 2}) {
    std::vector<double> h(static_cast<size_t>(n * n), 0.0);
    for (const auto& win : *windows) {
      Tensor x;
      ASSERT_TRUE(ref->embed(win, x).is_ok());
      QkvRows rec;
      const auto len = static_cast<int64_t>(win.size());
      ASSERT_TRUE(ref->block_forward(0, x, len, &rec).is_ok());
      for (int64_t r = k; r < len; ++r)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j)
            h[static_cast<size_t>(i * n + j)] += static_cast<double>(rec.rows[r * n + i]) * rec.rows[r * n + j];
    }
    auto q = load_tiny();
    PipelineOptions o = small(CompressMethod::rtn, 4, 16);
    o.max_layers = 1;
    o.sink_tokens = k;
    std::vector<CompressedLinearResult> res;
    ASSERT_TRUE(compress_model(*q, *windows, o, res).is_ok());
    ASSERT_EQ(res[0].name, "blk.0.attn_q");
    const Tensor wq = *(*q->linear_weight(0, LinearKind::q))->to(Device::cpu);
    double num = 0, den = 0;  // Σ_o dW_o H dW_oᵀ, Σ_o W_o H W_oᵀ
    for (int64_t r = 0; r < w.dim(0); ++r)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const double a = w.data_as<float>()[r * n + i], b = w.data_as<float>()[r * n + j];
          const double da = a - wq.data_as<float>()[r * n + i], db = b - wq.data_as<float>()[r * n + j];
          num += da * h[static_cast<size_t>(i * n + j)] * db;
          den += a * h[static_cast<size_t>(i * n + j)] * b;
        }
    std::printf("sink tokens %lld: blk.0.attn_q error %.6e, from H without them %.6e\n", static_cast<long long>(k),
                res[0].error, num / den);
    EXPECT_NEAR(res[0].error, num / den, 1e-4 * num / den) << "sink tokens " << k;
  }
  // Windows no longer than the sink tokens leave nothing for H: a clear refusal.
  auto q = load_tiny();
  PipelineOptions o = small(CompressMethod::gptq, 4, 16);
  o.sink_tokens = 24;
  std::vector<CompressedLinearResult> none;
  auto st = compress_model(*q, *windows, o, none);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("--sink-tokens"), std::string::npos) << st.status().message();
}

// PipelineOptions::activations: X on the device (here the cpu: in place), in host memory (copied
// through a one-window scratch) or in a spill file gives the same bits; the spill file is gone
// after the run, also after one that fails halfway (a bad token id in the last window).
TEST(CompressModel, ActivationPlacementsGiveTheSameBits) {
  auto ref = load_tiny();
  ASSERT_TRUE(ref);
  auto windows = calibration_windows(ref->tokenizer(), calib_text(6), 6, 40, 2);
  ASSERT_TRUE(windows.is_ok()) << windows.status().to_string();
  windows->back().resize(29);  // windows of different lengths
  const fs::path dir = lithe_test::tmp_path("pipeline_spill");
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Run {
    PipelineReport rep;
    std::vector<CompressedLinearResult> res;
    std::vector<Tensor> weights;  // every compressed linear as the model now holds it
  };
  auto run = [&](ActivationPlacement p) {
    Run r;
    auto m = load_tiny();
    PipelineOptions o = small(CompressMethod::gptq, 4, 16);
    o.activations = p;
    o.spill_dir = dir.string();
    auto rep = compress_model(*m, *windows, o, r.res);
    EXPECT_TRUE(rep.is_ok()) << rep.status().to_string();
    if (rep.is_ok()) r.rep = *rep;
    for (int64_t l = 0; l < m->config().n_layers; ++l)
      for (LinearKind k : kAllLinearKinds) r.weights.push_back(*(*m->linear_weight(l, k))->to(Device::cpu));
    return r;
  };
  const Run dev = run(ActivationPlacement::device);
  EXPECT_EQ(dev.rep.activations, ActivationPlacement::device);
  EXPECT_EQ(run(ActivationPlacement::automatic).rep.activations, ActivationPlacement::device);  // tiny X fits
  for (ActivationPlacement p : {ActivationPlacement::host, ActivationPlacement::disk}) {
    SCOPED_TRACE(activation_placement_name(p));
    const Run got = run(p);
    EXPECT_EQ(got.rep.activations, p);
    EXPECT_EQ(got.rep.activation_bytes, dev.rep.activation_bytes);
    EXPECT_EQ(got.rep.total_error, dev.rep.total_error);
    ASSERT_EQ(got.res.size(), dev.res.size());
    for (size_t i = 0; i < got.res.size(); ++i) {
      ASSERT_TRUE(got.res[i].q && dev.res[i].q);
      EXPECT_EQ(got.res[i].q->codes, dev.res[i].q->codes) << got.res[i].name;
      EXPECT_EQ(got.res[i].q->scales, dev.res[i].q->scales) << got.res[i].name;
      EXPECT_EQ(got.res[i].q->zeros, dev.res[i].q->zeros) << got.res[i].name;
      EXPECT_EQ(got.res[i].error, dev.res[i].error) << got.res[i].name;
    }
    for (size_t i = 0; i < got.weights.size(); ++i)
      EXPECT_EQ(std::memcmp(got.weights[i].data(), dev.weights[i].data(), dev.weights[i].nbytes()), 0) << i;
    EXPECT_TRUE(fs::is_empty(dir));
  }
  auto m = load_tiny();
  auto bad = *windows;
  bad.back()[3] = static_cast<int32_t>(m->config().vocab_size);  // embed fails after X was spilled
  PipelineOptions o = small(CompressMethod::gptq, 4, 16);
  o.activations = ActivationPlacement::disk;
  o.spill_dir = dir.string();
  std::vector<CompressedLinearResult> none;
  auto st = compress_model(*m, bad, o, none);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.status().message().find("out of range"), std::string::npos) << st.status().message();
  EXPECT_TRUE(fs::is_empty(dir));
  o.spill_dir = (dir / "missing").string();  // a spill directory that is not there: a clear refusal
  auto missing = compress_model(*m, *windows, o, none);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("missing"), std::string::npos) << missing.status().message();
}

// Layer 0 of the default model with 8 windows of 256 SOTU tokens: GPTQ beats RTN on q_proj.
TEST(CompressModel, DefaultModelLayer0) {
  const std::string model = std::string(LITHE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const std::string text_path = std::string(LITHE_SOURCE_DIR) + "/" + kDefaultCalibrationText;
  if (!fs::exists(model) || !fs::exists(text_path)) GTEST_SKIP() << "needs " << model << " and " << text_path;
  auto text = read_text_file(text_path);
  ASSERT_TRUE(text.is_ok());
  LoadOptions lo;
  lo.dequantize = true;
  auto a = Model::load(model, lo);
  ASSERT_TRUE(a.is_ok());
  auto windows = calibration_windows((*a)->tokenizer(), *text, 8, 256, 0);
  ASSERT_TRUE(windows.is_ok()) << windows.status().to_string();
  std::vector<Tensor> orig;  // layer 0's weights, restored between the two runs (one load)
  for (LinearKind k : kAllLinearKinds) orig.push_back(*(*(*a)->linear_weight(0, k))->to(Device::cpu));
  PipelineOptions o = small(CompressMethod::gptq, 4, 32);
  o.max_layers = 1;
  std::vector<CompressedLinearResult> rg, rr;
  auto rep_g = compress_model(**a, *windows, o, rg);
  for (size_t i = 0; i < orig.size(); ++i) **(*a)->linear_weight(0, kAllLinearKinds[i]) = orig[i];
  o.method = CompressMethod::rtn;
  auto rep_r = compress_model(**a, *windows, o, rr);
  ASSERT_TRUE(rep_g.is_ok() && rep_r.is_ok());
  ASSERT_EQ(rg.size(), 7u);
  EXPECT_EQ(rg[0].name, "blk.0.attn_q");
  std::printf("SmolLM2 layer 0, 8x256 tokens: q_proj error gptq %.5f rtn %.5f; layer totals gptq %.4f rtn %.4f; "
              "gptq %.2f s (forward %.2f, H %.2f, solve %.2f)\n",
              rg[0].error, rr[0].error, rep_g->total_error, rep_r->total_error, rep_g->seconds,
              rep_g->seconds_forward, rep_g->seconds_hessian, rep_g->seconds_solve);
  EXPECT_LT(rg[0].error, rr[0].error);
  EXPECT_LT(rep_g->total_error, rep_r->total_error);
}

}  // namespace
