// The paged KV store (runtime/kv_pool.h) and paged caches (KvCache::create_paged): blocks are
// taken all or nothing and come back when a cache is cleared, destroyed or moved over; append
// takes the blocks its slots need and names the pool when it runs dry; and a model run through
// paged caches whose blocks are scattered over the pool (odd block sizes, two sequences taking
// turns, f32 and f16, full and sink policies, one batched forward) gives the same logits, bit
// for bit, as through contiguous caches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "lithe/models/model.h"
#include "lithe/runtime/kv_pool.h"

namespace lithe {
namespace {

TEST(KvPool, AllocateReleaseAndRefuseWhenShort) {
  auto p = KvPool::create(2, 4, 16, 8, DType::f32);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  KvPool& a = **p;
  EXPECT_EQ(a.blocks_for(0), 0);
  EXPECT_EQ(a.blocks_for(1), 1);
  EXPECT_EQ(a.blocks_for(16), 1);
  EXPECT_EQ(a.blocks_for(17), 2);
  EXPECT_EQ(a.k(1).dim(0), 64);
  EXPECT_EQ(a.bytes(), size_t{2} * 2 * 64 * 8 * 4);
  std::vector<int32_t> t1, t2;
  EXPECT_TRUE(a.allocate(3, t1));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_FALSE(a.allocate(2, t2));  // all or nothing
  EXPECT_TRUE(t2.empty());
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_TRUE(a.allocate(1, t2));
  std::vector<int32_t> all = t1;
  all.insert(all.end(), t2.begin(), t2.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 2, 3}));  // distinct ids
  a.release(t1);
  EXPECT_TRUE(t1.empty());
  EXPECT_EQ(a.num_free(), 3);
}

TEST(KvPool, BadSizesNameTheValue) {
  auto a = KvPool::create(2, 4, 0, 8, DType::f32);
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("--block-size 0"), std::string::npos) << a.status().message();
  auto b = KvPool::create(2, 0, 16, 8, DType::f32);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("--kv-blocks 0"), std::string::npos) << b.status().message();
  auto c = KvPool::create(2, 4, 16, 8, DType::i32);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("i32"), std::string::npos) << c.status().message();
}

TEST(PagedCache, TakesBlocksAsItGrowsAndGivesThemBack) {
  auto pool = *KvPool::create(1, 5, 4, 8, DType::f32);
  auto c = KvCache::create_paged(pool, 18);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->paged());
  EXPECT_EQ(c->max_blocks(), 5);
  EXPECT_EQ(c->blocks_to_append(5), 2);
  std::vector<int32_t> pos(18);
  for (int i = 0; i < 18; ++i) pos[static_cast<size_t>(i)] = i;
  ASSERT_TRUE(c->append(pos.data(), 5).is_ok());
  EXPECT_EQ(c->blocks().size(), 2u);
  EXPECT_EQ(pool->num_free(), 3);
  EXPECT_EQ(c->blocks_to_append(3), 0);  // slots 5..7 are in block 1
  EXPECT_EQ(c->blocks_to_append(4), 1);
  // A second cache takes what is left; the first then cannot grow, and says why.
  auto d = KvCache::create_paged(pool, 18);
  ASSERT_TRUE(d.is_ok());
  ASSERT_TRUE(d->reserve(12));
  EXPECT_EQ(pool->num_free(), 0);
  EXPECT_FALSE(c->reserve(9));
  auto r = c->append(pos.data() + 5, 4);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("out of blocks"), std::string::npos) << r.status().message();
  EXPECT_EQ(c->size(), 5);  // nothing appended
  // Clearing, moving over and destroying give blocks back; a moved-from cache holds none.
  d->clear();
  EXPECT_EQ(pool->num_free(), 3);
  ASSERT_TRUE(c->append(pos.data() + 5, 4).is_ok());
  KvCache moved = std::move(*c);
  EXPECT_EQ(moved.blocks().size(), 3u);
  EXPECT_EQ(pool->num_free(), 2);
  *d = std::move(moved);
  EXPECT_EQ(pool->num_free(), 2);
  { KvCache gone = std::move(*d); }
  EXPECT_EQ(pool->num_free(), 5);
  // The block table maps slots to rows.
  KvCache e = KvCache::create_paged(pool, 18).value();
  std::vector<int32_t> hold;
  ASSERT_TRUE(pool->allocate(1, hold));  // block 0 taken elsewhere: e starts at block 1
  ASSERT_TRUE(e.reserve(6));
  const KvPages pg = e.pages();
  EXPECT_EQ(pg.row(0), e.blocks()[0] * 4);
  EXPECT_EQ(pg.row(5), e.blocks()[1] * 4 + 1);
  EXPECT_EQ(KvPages{}.row(7), 7);
  pool->release(hold);
}

// Head size 64: a shape the CUDA attention kernels take too.
ModelConfig small_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2, c.d_model = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.d_ff = 384;
  c.vocab_size = 100, c.rope_dim = 64, c.max_context = 256;
  return c;
}

// Two sequences fed in turns (prompt chunks, then tokens one at a time, the last steps in one
// batched forward), through contiguous caches and through paged ones whose blocks interleave.
std::vector<float> run_two(Model& m, KvCache& a, KvCache& b) {
  std::vector<float> out, logits;
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 40; ++i) {
    ta.push_back((i * 37 + 11) % 100);
    tb.push_back((i * 53 + 7) % 100);
  }
  auto feed = [&](KvCache& c, const std::vector<int32_t>& t, int i0, int i1) {
    EXPECT_TRUE(m.forward(c, std::span<const int32_t>(t.data() + i0, static_cast<size_t>(i1 - i0)), true, logits).is_ok());
    out.insert(out.end(), logits.begin(), logits.end());
  };
  feed(a, ta, 0, 11);  // > 8 tokens: the CUDA prefill kernel
  feed(b, tb, 0, 5);
  for (int i = 5; i < 20; ++i) {
    feed(b, tb, i, i + 1);
    feed(a, ta, i + 6, i + 7);
  }
  for (int i = 20; i < 30; ++i) {  // batched steps: one forward over both
    const int32_t pa = a.positions()[a.size() - 1] + 1, pb = b.positions()[b.size() - 1] + 1;
    const SequenceInput in[] = {{&a, std::span<const int32_t>(&ta[static_cast<size_t>(i + 7)], 1),
                                 std::span<const int32_t>(&pa, 1), false},
                                {&b, std::span<const int32_t>(&tb[static_cast<size_t>(i)], 1),
                                 std::span<const int32_t>(&pb, 1), false}};
    EXPECT_TRUE(m.forward(in, logits).is_ok());
    out.insert(out.end(), logits.begin(), logits.end());
  }
  return out;
}

// On the CPU and, where there is one, on a CUDA device (the batched steps there replay captured
// graphs while the block tables grow).
TEST(PagedCache, ModelLogitsEqualContiguousBitForBit) {
  for (Device dev : {Device::cpu, Device::cuda}) {
    auto m = Model::synthetic(small_config(), DType::f16, dev, 5);
    if (dev == Device::cuda && !m.is_ok()) {
      std::printf("paged caches on cuda not run: %s\n", m.status().to_string().c_str());
      continue;
    }
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    for (DType dt : {DType::f32, DType::f16})
      for (const CacheSpec& spec : {CacheSpec{CachePolicy::full, 0, 0}, CacheSpec{CachePolicy::sink, 3, 11}})
        for (int64_t bs : {1, 3, 16}) {
          SCOPED_TRACE(fmt::format("{} {} {} block {}", device_name(dev), dtype_name(dt),
                                   cache_policy_name(spec.policy), bs));
          auto ca = (*m)->new_cache(spec, 64, dt), cb = (*m)->new_cache(spec, 64, dt);
          ASSERT_TRUE(ca.is_ok() && cb.is_ok());
          const std::vector<float> want = run_two(**m, *ca, *cb);
          auto pool = (*m)->new_kv_pool(80 / bs + 8, bs, dt);
          ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
          std::vector<int32_t> hold;  // scramble the free list: the caches get blocks out of order
          ASSERT_TRUE((*pool)->allocate(5, hold));
          std::shuffle(hold.begin(), hold.end(), std::mt19937(static_cast<uint32_t>(bs)));
          (*pool)->release(hold);
          auto pa = (*m)->new_cache(spec, 64, *pool), pb = (*m)->new_cache(spec, 64, *pool);
          ASSERT_TRUE(pa.is_ok() && pb.is_ok()) << pa.status().to_string();
          const std::vector<float> got = run_two(**m, *pa, *pb);
          ASSERT_EQ(got.size(), want.size());
          EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
          const auto& blk = pa->blocks();  // really scattered: not one run of consecutive blocks
          const bool one_run =
              std::adjacent_find(blk.begin(), blk.end(), [](int32_t x, int32_t y) { return y != x + 1; }) == blk.end();
          if (bs < 16) {
            EXPECT_FALSE(one_run);
          }
        }
  }
}

}  // namespace
}  // namespace lithe
