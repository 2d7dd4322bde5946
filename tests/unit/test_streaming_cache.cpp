// StreamingLLM caches (runtime/kv_cache.h, runtime/cache_policy.h): which tokens a rolling cache
// keeps and the positions it gives them; the invariant that after every eviction the
// attention output with re-indexed positions equals a from-scratch computation over the kept
// tokens at those positions (backend op on random tensors, both RoPE styles, f32 and f16 caches;
// whole 1-layer random models); no eviction yet = the full cache; generation past the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>
#include <vector>

#include "lithe/decode/generate.h"
#include "lithe/eval/line_plot.h"
#include "lithe/models/model.h"
#include "lithe/runtime/cache_policy.h"
#include "test_tmp.h"

namespace lithe {
namespace {

// The stream indices a sink+window policy keeps after `seen` tokens, oldest first.
std::vector<int64_t> expected_kept(int64_t sinks, int64_t window, int64_t seen) {
  std::vector<int64_t> kept;
  const int64_t s = std::min(sinks, seen);
  for (int64_t i = 0; i < s; ++i) kept.push_back(i);
  for (int64_t i = std::max(s, seen - window); i < seen; ++i) kept.push_back(i);
  return kept;
}

// Appends stream tokens m at a time, recording which stream index each slot holds, and checks
// after every append that the held slots are exactly the expected tokens at positions 0..n-1.
struct StreamTracker {
  explicit StreamTracker(KvCache c) : cache(std::move(c)) {}
  KvCache cache;
  std::map<int64_t, int64_t> slot_token;  // slot -> stream index
  int64_t seen = 0;

  std::vector<int64_t> append(int64_t m) {
    auto slots = cache.append(nullptr, m);
    EXPECT_TRUE(slots.is_ok()) << slots.status().to_string();
    for (int64_t i = 0; i < m; ++i) slot_token[(*slots)[static_cast<size_t>(i)]] = seen + i;
    seen += m;
    check();
    return *slots;
  }
  // Stream indices of the held slots, by position (which must be 0..n-1).
  std::vector<int64_t> kept_by_position() const {
    std::vector<int64_t> kept(static_cast<size_t>(cache.held()), -1);
    for (int64_t s = 0; s < cache.size(); ++s) {
      const int32_t p = cache.positions()[s];
      if (p == KvCache::kNoPosition) continue;
      EXPECT_LT(p, cache.held());
      if (p < cache.held()) kept[static_cast<size_t>(p)] = slot_token.at(s);
    }
    return kept;
  }
  void check() const {
    EXPECT_EQ(cache.seen(), seen);
    EXPECT_EQ(kept_by_position(), expected_kept(cache.sinks(), cache.window(), seen)) << "after " << seen;
  }
};

TEST(RollingCache, KeepsSinksAndWindowWithReindexedPositions) {
  for (int64_t sinks : {0, 1, 4})
    for (int64_t window : {1, 3, 8})
      for (int64_t m : {1, 2, 3}) {
        if (m > window) continue;
        auto c = KvCache::create_rolling(1, sinks, window, 4, DType::f32);
        ASSERT_TRUE(c.is_ok());
        StreamTracker t{std::move(*c)};
        for (int step = 0; step < 9; ++step) t.append(m);
        EXPECT_EQ(t.cache.held(), std::min(t.seen, sinks + window));
      }
}

TEST(RollingCache, RewindDropsTheNewestOrStartsOver) {
  auto c = KvCache::create_rolling(1, 2, 4, 4, DType::f32);
  ASSERT_TRUE(c.is_ok());
  StreamTracker t{std::move(*c)};
  for (int i = 0; i < 5; ++i) t.append(1);  // nothing evicted: 0 1 | 2 3 4
  EXPECT_EQ(t.cache.rewind(1), 1);          // a prefix of the sinks
  t.seen = 1;
  t.check();
  for (int i = 0; i < 9; ++i) t.append(1);  // 0 1 | 6 7 8 9 (ring wrapped)
  EXPECT_EQ(t.cache.rewind(8), 8);          // drops 8 and 9
  t.seen = 8;
  EXPECT_EQ(t.kept_by_position(), (std::vector<int64_t>{0, 1, 6, 7}));
  t.append(2);                              // refills the freed ring slots: 0 1 | 6 7 8 9
  EXPECT_EQ(t.cache.rewind(20), 10);        // beyond the stream: unchanged
  EXPECT_EQ(t.cache.rewind(3), 0);          // token 3 was evicted: start over
  EXPECT_EQ(t.cache.held(), 0);
  t.seen = 0;
  t.slot_token.clear();
  t.append(3);
}

TEST(RollingCache, RefusesMoreTokensThanTheWindowAtOnce) {
  auto c = KvCache::create_rolling(1, 4, 8, 4, DType::f32);
  ASSERT_TRUE(c.is_ok());
  auto r = c->append(nullptr, 9);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("window of 8"), std::string::npos) << r.status().message();
  EXPECT_FALSE(KvCache::create_rolling(1, -1, 8, 4, DType::f32).is_ok());
  EXPECT_FALSE(KvCache::create_rolling(1, 4, 0, 4, DType::f32).is_ok());
}

TEST(CachePolicy, ParsesAndValidatesNamingTheValue) {
  auto bogus = parse_cache_policy("bogus");
  ASSERT_FALSE(bogus.is_ok());
  EXPECT_NE(bogus.status().message().find("'bogus'"), std::string::npos);
  for (auto p : {CachePolicy::full, CachePolicy::window, CachePolicy::recompute, CachePolicy::sink})
    EXPECT_EQ(*parse_cache_policy(cache_policy_name(p)), p);
  auto msg = [](CacheSpec s) { return validate_cache_spec(s, 2048).message(); };
  EXPECT_NE(msg({CachePolicy::sink, 4, 0}).find("--window 0"), std::string::npos);
  EXPECT_NE(msg({CachePolicy::sink, -1, 8}).find("--sinks -1"), std::string::npos);
  EXPECT_NE(msg({CachePolicy::sink, 4, 2046}).find("2048"), std::string::npos);
  EXPECT_TRUE(validate_cache_spec({CachePolicy::sink, 4, 2044}, 2048).is_ok());
  EXPECT_FALSE(make_cache({CachePolicy::recompute, 0, 8}, 1, 8, 4, DType::f32, Device::cpu).is_ok());
}

// ---- the attention invariant on random tensors ----

std::vector<float> randv(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

Tensor rows_of(const std::vector<float>& data, int64_t rows, int64_t cols) {
  auto t = Tensor::empty(DType::f32, {rows, cols});
  EXPECT_TRUE(t.is_ok());
  std::copy(data.begin(), data.end(), t->data_as<float>());
  return *t;
}

TEST(RollingCache, RopeLookupEqualsRopeBitForBit) {
  cpu::RopeTable rt;
  rt.rot_dim = 64;
  for (int64_t i = 0; i < 32; ++i) rt.inv_freq.push_back(static_cast<float>(std::pow(1e5, -i / 32.0)));
  std::mt19937 rng(1);
  const int64_t n = 300, heads = 3, hd = 64;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 2000);
  const auto angles = cpu::rope_angles(rt, 2000);
  for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half}) {
    std::vector<float> a = randv(rng, n * heads * hd), b = a;
    cpu::rope(a.data(), n, heads, hd, pos.data(), rt, style);
    cpu::rope_lookup(b.data(), n, heads, hd, pos.data(), rt, angles.data(), style);
    EXPECT_EQ(a, b);
  }
}

struct AttnCase {
  int64_t sinks, window, m;
  cpu::RopeStyle style;
  DType dtype;
};

// Streams `steps` x m random tokens through a rolling cache; after every step the new tokens'
// attention outputs equal a fresh full cache fed the kept tokens' (un-rotated) k / v at positions
// 0..n-1 and queried at the new tokens' positions.
void check_attention_invariant(const AttnCase& tc, int steps) {
  const AttentionShape sh{4, 2, 16, 0.25f};
  const int64_t qd = sh.n_heads * sh.head_dim, kvd = sh.n_kv_heads * sh.head_dim;
  cpu::RopeTable rt;
  rt.rot_dim = 12;  // partial rotation, as some families use
  for (int64_t i = 0; i < rt.rot_dim / 2; ++i)
    rt.inv_freq.push_back(static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / rt.rot_dim)));
  auto be = make_cpu_backend();
  auto c = KvCache::create_rolling(1, tc.sinks, tc.window, kvd, tc.dtype);
  ASSERT_TRUE(c.is_ok());
  StreamTracker t{std::move(*c)};
  std::mt19937 rng(7);
  std::vector<std::vector<float>> ks, vs;  // every stream token's k / v rows
  const double tol = tc.dtype == DType::f32 ? 1e-5 : 3e-3;
  for (int step = 0; step < steps; ++step) {
    const int64_t m = tc.m;
    const auto q0 = randv(rng, m * qd), k0 = randv(rng, m * kvd), v0 = randv(rng, m * kvd);
    for (int64_t i = 0; i < m; ++i) {
      ks.emplace_back(k0.begin() + i * kvd, k0.begin() + (i + 1) * kvd);
      vs.emplace_back(v0.begin() + i * kvd, v0.begin() + (i + 1) * kvd);
    }
    const std::vector<int64_t> slots = t.append(m);
    std::vector<int32_t> qpos;
    for (int64_t s : slots) qpos.push_back(t.cache.positions()[s]);
    Tensor q = rows_of(q0, m, qd), k = rows_of(k0, m, kvd), v = rows_of(v0, m, kvd), out = rows_of(q0, m, qd);
    ASSERT_TRUE(be->rope_attention(t.cache, 0, q, k, v, m, qpos.data(), slots.data(), rt, tc.style, sh, out).is_ok());

    // From scratch: the kept tokens in position order, the last m of them the new ones.
    const std::vector<int64_t> kept = expected_kept(tc.sinks, tc.window, t.seen);
    const auto n = static_cast<int64_t>(kept.size());
    for (int64_t i = 0; i < m; ++i) ASSERT_EQ(qpos[static_cast<size_t>(i)], n - m + i);
    auto ref = KvCache::create(1, n, kvd, tc.dtype);
    ASSERT_TRUE(ref.is_ok());
    std::vector<float> kk, vv;
    for (int64_t tok : kept) {
      kk.insert(kk.end(), ks[static_cast<size_t>(tok)].begin(), ks[static_cast<size_t>(tok)].end());
      vv.insert(vv.end(), vs[static_cast<size_t>(tok)].begin(), vs[static_cast<size_t>(tok)].end());
    }
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    auto rslots = ref->append(pos.data(), n);
    ASSERT_TRUE(rslots.is_ok());
    // Queries: dummies for the older kept tokens, the real ones for the new m.
    std::vector<float> qq(static_cast<size_t>((n - m) * qd), 0.5f);
    qq.insert(qq.end(), q0.begin(), q0.end());
    Tensor rq = rows_of(qq, n, qd), rk = rows_of(kk, n, kvd), rv = rows_of(vv, n, kvd), rout = rows_of(qq, n, qd);
    ASSERT_TRUE(be->rope_attention(*ref, 0, rq, rk, rv, n, pos.data(), rslots->data(), rt, tc.style, sh, rout).is_ok());
    double max_diff = 0, max_ref = 0;
    for (int64_t i = 0; i < m * qd; ++i) {
      const double want = rout.data_as<float>()[(n - m) * qd + i];
      max_diff = std::max(max_diff, std::abs(out.data_as<float>()[i] - want));
      max_ref = std::max(max_ref, std::abs(want));
    }
    ASSERT_LE(max_diff, tol * max_ref) << "step " << step << " sinks " << tc.sinks << " window " << tc.window;
  }
}

TEST(RollingCache, AttentionEqualsFromScratchOverKeptTokens) {
  for (auto style : {cpu::RopeStyle::interleaved, cpu::RopeStyle::half})
    for (const AttnCase& tc : {AttnCase{4, 6, 1, style, DType::f32}, AttnCase{0, 5, 1, style, DType::f32},
                               AttnCase{1, 1, 1, style, DType::f32}, AttnCase{2, 7, 3, style, DType::f32},
                               AttnCase{4, 70, 1, style, DType::f32}, AttnCase{4, 6, 2, style, DType::f16}})
      check_attention_invariant(tc, tc.window > 50 ? 90 : 14);
}

// ---- whole models ----

ModelConfig small_config(int64_t layers) {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = layers, c.d_model = 64, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.d_ff = 96;
  c.vocab_size = 100, c.rope_dim = 16, c.max_context = 256;
  return c;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::abs(a[i] - b[i])));
    r = std::max(r, static_cast<double>(std::abs(b[i])));
  }
  return d / r;
}

// One layer: a token's K/V depend on the token alone, so the streamed logits must equal a fresh
// forward over the kept tokens.
TEST(RollingCache, OneLayerModelEqualsFromScratchAfterEveryEviction) {
  auto m = Model::synthetic(small_config(1), DType::f32, Device::cpu, 5);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const int64_t sinks = 2, window = 5;
  auto c = (*m)->new_cache(CacheSpec{CachePolicy::sink, sinks, window}, 0);
  ASSERT_TRUE(c.is_ok());
  std::mt19937 rng(3);
  std::vector<int32_t> stream;
  std::vector<float> got, want;
  for (int t = 0; t < 16; ++t) {
    stream.push_back(static_cast<int32_t>(rng() % 100));
    ASSERT_TRUE((*m)->forward(*c, std::span<const int32_t>(&stream.back(), 1), false, got).is_ok());
    std::vector<int32_t> kept;
    for (int64_t i : expected_kept(sinks, window, static_cast<int64_t>(stream.size())))
      kept.push_back(stream[static_cast<size_t>(i)]);
    auto ref = (*m)->new_cache(static_cast<int64_t>(kept.size()));
    ASSERT_TRUE(ref.is_ok());
    ASSERT_TRUE((*m)->forward(*ref, kept, false, want).is_ok());
    EXPECT_LE(rel_diff(got, want), 1e-4) << "token " << t;
  }
}

// Until the first eviction a rolling cache is the full cache (tiny llama3 checkpoint: half-style
// RoPE; and f16 caches), and it then keeps going past its capacity.
TEST(RollingCache, NoEvictionEqualsFullThenRunsPastCapacity) {
  auto m = Model::load(lithe_test::tiny_model_dir("llama3"));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const int64_t vocab = (*m)->config().vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 24; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  for (DType dt : {DType::f32, DType::f16}) {
    auto full = (*m)->new_cache(64, dt);
    auto roll = (*m)->new_cache(CacheSpec{CachePolicy::sink, 4, 20}, 0, dt);
    ASSERT_TRUE(full.is_ok() && roll.is_ok());
    std::vector<float> a, b;
    ASSERT_TRUE((*m)->forward(*full, std::span<const int32_t>(ids.data(), 16), true, a).is_ok());
    ASSERT_TRUE((*m)->forward(*roll, std::span<const int32_t>(ids.data(), 16), true, b).is_ok());
    EXPECT_LE(rel_diff(b, a), dt == DType::f32 ? 1e-5 : 2e-3);
    for (int64_t t = 16; t < 24; ++t)  // the rest one at a time: 24 > 4 + 20 evicts
      ASSERT_TRUE((*m)->forward(*full, std::span<const int32_t>(ids.data() + t, 1), false, a).is_ok() &&
                  (*m)->forward(*roll, std::span<const int32_t>(ids.data() + t, 1), false, b).is_ok());
    EXPECT_LE(rel_diff(std::vector<float>(b.begin(), b.begin() + vocab), a), dt == DType::f32 ? 1e-5 : 2e-3);
    for (int64_t t = 0; t < 40; ++t)
      ASSERT_TRUE((*m)->forward(*roll, std::span<const int32_t>(ids.data() + t % 24, 1), false, b).is_ok());
    for (float x : b) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(roll->held(), 24);
    EXPECT_EQ(roll->seen(), 64);
  }

  // Generation through a sink cache goes past its capacity; history keeps every token seen.
  auto cache = (*m)->new_cache(CacheSpec{CachePolicy::sink, 2, 8}, 0);
  ASSERT_TRUE(cache.is_ok());
  GenerateOptions go;
  go.max_tokens = 30;
  go.stop_at_eog = false;
  go.sampling.temperature = 0;
  std::vector<int32_t> history;
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 20);  // longer than the window: chunked
  auto r = generate(**m, *cache, history, prompt, go);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->finish_reason, "length");
  EXPECT_EQ(static_cast<int64_t>(history.size()), cache->seen());
  EXPECT_EQ(cache->held(), 10);
  // A follow-up that extends the history reuses the cache (runs only the new tokens).
  std::vector<int32_t> more = history;
  more.push_back(ids[0]);
  auto r2 = generate(**m, *cache, history, more, go);
  ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
  EXPECT_EQ(r2->prompt_tokens, 1);
}

TEST(LinePlot, WritesAValidPng) {
  const std::string png = encode_png_indexed(2, 1, {0, 1}, {0, 0, 0, 255, 255, 255});
  ASSERT_GE(png.size(), 8u + 25u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n"));
  EXPECT_EQ(png.substr(png.size() - 12), std::string("\0\0\0\0IEND\xae\x42\x60\x82", 12));  // IEND + its CRC
  const auto path = lithe_test::tmp_path("plot.png");
  ASSERT_TRUE(write_line_plot_png(path.string(), {{"sink s=4", {{0, 3}, {10, 2.5}}}, {"window", {{0, 3}, {10, 4}}}},
                                  {"t", "tokens", "log ppl"}).is_ok());
  EXPECT_GT(std::filesystem::file_size(path), 100000u);
  EXPECT_FALSE(write_line_plot_png(path.string(), {}, {}).is_ok());
}

}  // namespace
}  // namespace lithe
