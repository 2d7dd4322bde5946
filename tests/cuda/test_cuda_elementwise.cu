// Runs on a GPU machine: the element-wise CUDA kernels (src/kernels/cuda/elementwise.cu, and the
// fused rope + KV store of rope_kv.cu against its unfused composition) against
// scalar references (cpu:: kernels where they exist, plain loops otherwise) on random inputs with
// fixed seeds and odd sizes, aligned (float4 path) and offset by one element (scalar path).
// Argument checks run without a device (the launchers fail before touching it).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "lithe/core/buffer.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/cuda_ops.h"
#include "cuda_test_util.h"

using namespace lithe;
using namespace lithe::cuda_test;

namespace {

constexpr int64_t kSizes[] = {1, 3, 17, 576, 1000, 4097};
constexpr int64_t kRows[] = {1, 2, 7};

class CudaElementwise : public CudaStreamTest {};

}  // namespace

TEST_F(CudaElementwise, EmbeddingGathersRowsOfEveryTableType) {
  std::mt19937 rng(11);
  const int64_t vocab = 37;
  for (cuda::WeightType t : {cuda::WeightType::f32, cuda::WeightType::f16, cuda::WeightType::bf16}) {
    for (int64_t d : kSizes) {
      const std::vector<float> values = randn(static_cast<size_t>(vocab * d), rng);
      // The table in its type, and the exact f32 values it holds.
      std::vector<float> exact(values.size()), table32;
      std::vector<uint16_t> table16(values.size());
      for (size_t i = 0; i < values.size(); ++i) {
        if (t == cuda::WeightType::f16) {
          table16[i] = f32_to_f16(values[i]);
          exact[i] = f16_to_f32(table16[i]);
        } else if (t == cuda::WeightType::bf16) {
          table16[i] = f32_to_bf16(values[i]);
          exact[i] = bf16_to_f32(table16[i]);
        } else {
          exact[i] = values[i];
        }
      }
      Dev<float> t32(t == cuda::WeightType::f32 ? values : std::vector<float>{});
      Dev<uint16_t> t16(t == cuda::WeightType::f32 ? std::vector<uint16_t>{} : table16);
      const void* table = t == cuda::WeightType::f32 ? static_cast<const void*>(t32.get()) : t16.get();
      for (int64_t n : kRows) {
        std::vector<int32_t> ids(static_cast<size_t>(n));
        for (auto& id : ids) id = static_cast<int32_t>(rng() % vocab);
        ids[0] = static_cast<int32_t>(vocab - 1);
        // Every third row reads its id from the feed (kArgmaxToken, the last top_k's best ids).
        std::vector<int32_t> feed(static_cast<size_t>(n)), given = ids;
        for (int64_t r = 0; r < n; ++r) {
          feed[r] = static_cast<int32_t>(rng() % vocab);
          if (r % 3 == 1) given[r] = -1, ids[r] = feed[r];
        }
        Dev<int32_t> dids(given), dfeed(feed);
        Dev<float> out(std::vector<float>(static_cast<size_t>(n * d), -7.0f));
        ASSERT_TRUE(cuda::embedding(table, t, d, dids.get(), n, out.get(), stream_, dfeed.get()).is_ok());
        sync();
        std::vector<float> want(static_cast<size_t>(n * d));
        for (int64_t r = 0; r < n; ++r)
          std::copy_n(exact.begin() + ids[r] * d, d, want.begin() + r * d);
        expect_bits(out.host(), want, "type " + std::to_string(static_cast<int>(t)) + " d=" + std::to_string(d) +
                                          " n=" + std::to_string(n));
      }
    }
  }
}

TEST_F(CudaElementwise, RmsNormMatchesCpu) {
  std::mt19937 rng(12);
  for (int64_t n : kSizes) {
    for (int64_t m : kRows) {
      const std::vector<float> x = randn(static_cast<size_t>(m * n), rng, 0.0f, 2.0f);
      const std::vector<float> w = randn(static_cast<size_t>(n), rng, 1.0f, 0.5f);
      std::vector<float> want(x.size());
      cpu::rmsnorm(x.data(), w.data(), 1e-5f, m, n, want.data());
      for (int variant = 0; variant < 3; ++variant) {  // separate output, in place, misaligned
        const std::string what = "n=" + std::to_string(n) + " m=" + std::to_string(m) + " variant " +
                                 std::to_string(variant);
        Dev<float> dx = upload(x, variant == 2), dw = upload(w, variant == 2);
        Dev<float> dy = upload(std::vector<float>(x.size(), 0.0f), variant == 2);
        float* y = variant == 1 ? dx.get() : dy.get();
        ASSERT_TRUE(cuda::rmsnorm(dx.get(), dw.get(), 1e-5f, m, n, y, stream_).is_ok());
        sync();
        expect_close(variant == 1 ? dx.host() : dy.host(), want, 1e-5f, 1e-7f, what);
      }
    }
  }
}

TEST_F(CudaElementwise, AddAndAddBiasAreExact) {
  std::mt19937 rng(13);
  for (int64_t n : kSizes) {
    for (bool misalign : {false, true}) {
      const std::vector<float> x = randn(static_cast<size_t>(n), rng), y = randn(static_cast<size_t>(n), rng);
      Dev<float> dx = upload(x, misalign), dy = upload(y, misalign);
      ASSERT_TRUE(cuda::add(dx.get(), dy.get(), n, stream_).is_ok());
      sync();
      std::vector<float> want(x);
      for (size_t i = 0; i < want.size(); ++i) want[i] += y[i];
      expect_bits(dx.host(), want, "add n=" + std::to_string(n) + " misalign " + std::to_string(misalign));
    }
    for (int64_t m : kRows) {
      const std::vector<float> y = randn(static_cast<size_t>(m * n), rng), b = randn(static_cast<size_t>(n), rng);
      Dev<float> dy(y), db(b);
      ASSERT_TRUE(cuda::add_bias(dy.get(), db.get(), m, n, stream_).is_ok());
      sync();
      std::vector<float> want(y);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t c = 0; c < n; ++c) want[r * n + c] += b[c];
      expect_bits(dy.host(), want, "add_bias n=" + std::to_string(n) + " m=" + std::to_string(m));
    }
  }
}

TEST_F(CudaElementwise, SiluMulMatchesCpu) {
  std::mt19937 rng(14);
  for (int64_t n : kSizes) {
    for (bool misalign : {false, true}) {
      const std::vector<float> g = randn(static_cast<size_t>(n), rng, 0.0f, 4.0f), u = randn(static_cast<size_t>(n), rng);
      std::vector<float> want(g);
      cpu::silu_mul(want.data(), u.data(), n);
      Dev<float> dg = upload(g, misalign), du = upload(u, misalign);
      ASSERT_TRUE(cuda::silu_mul(dg.get(), du.get(), n, stream_).is_ok());
      sync();
      expect_close(dg.host(), want, 1e-5f, 1e-30f, "n=" + std::to_string(n) + " misalign " + std::to_string(misalign));
    }
  }
}

TEST_F(CudaElementwise, RopeMatchesCpuAtLongPositions) {
  std::mt19937 rng(15);
  struct Shape {
    int64_t head_dim, rot_dim, n_heads;
  };
  for (Shape sh : {Shape{64, 64, 3}, Shape{128, 128, 32}, Shape{128, 64, 5}, Shape{80, 32, 2}}) {
    cpu::RopeTable table;
    table.rot_dim = sh.rot_dim;
    for (int64_t i = 0; i < sh.rot_dim / 2; ++i)
      table.inv_freq.push_back(static_cast<float>(std::pow(500000.0, -2.0 * static_cast<double>(i) / sh.rot_dim)));
    Dev<float> freq(table.inv_freq);
    for (cuda::RopeMode mode : {cuda::RopeMode::interleaved, cuda::RopeMode::half}) {
      for (int64_t m : kRows) {
        std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(m * sh.n_heads * sh.head_dim));
        for (float& v : x) v = ud(rng);
        std::vector<int32_t> pos(static_cast<size_t>(m));
        for (auto& p : pos) p = static_cast<int32_t>(rng() % 100001);
        pos[0] = 100000;
        if (m > 1) pos[1] = 0;
        std::vector<float> want(x);
        cpu::rope(want.data(), m, sh.n_heads, sh.head_dim, pos.data(), table,
                  mode == cuda::RopeMode::interleaved ? cpu::RopeStyle::interleaved : cpu::RopeStyle::half);
        Dev<float> dx(x);
        Dev<int32_t> dpos(pos);
        ASSERT_TRUE(
            cuda::rope(dx.get(), m, sh.n_heads, sh.head_dim, dpos.get(), freq.get(), sh.rot_dim, mode, stream_).is_ok());
        sync();
        const std::vector<float> got = dx.host();
        const std::string what = "head_dim " + std::to_string(sh.head_dim) + " rot " + std::to_string(sh.rot_dim) +
                                 " mode " + std::to_string(static_cast<int>(mode)) + " m=" + std::to_string(m);
        for (size_t i = 0; i < got.size(); ++i) {
          if (static_cast<int64_t>(i) % sh.head_dim >= sh.rot_dim)  // beyond rot_dim: untouched
            ASSERT_EQ(bits(got[i]), bits(x[i])) << what << " i=" << i;
          else
            ASSERT_NEAR(got[i], want[i], 1e-5f) << what << " i=" << i;
        }
      }
    }
  }
}

TEST_F(CudaElementwise, ConversionsRoundToNearestEven) {
  std::mt19937 rng(16);
  // Edge cases first: zeros, infinities, f16 overflow boundary, exact ties, subnormals.
  const std::vector<float> special = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                                      1e-8f, -3e-8f, std::ldexp(1.0f, -25), std::ldexp(3.0f, -25),
                                      1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11),
                                      1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(3.0f, -8), 1e-40f, -3e-39f,
                                      3.4e38f, -3.39e38f};
  for (int64_t n : kSizes) {
    for (bool misalign : {false, true}) {
      std::vector<float> x(static_cast<size_t>(n));
      for (size_t i = 0; i < x.size(); ++i) {
        if (i < special.size()) {
          x[i] = special[i];
        } else if (i % 2) {  // random bit patterns over all exponents (NaNs skipped)
          uint32_t b = static_cast<uint32_t>(rng());
          if ((b & 0x7f800000u) == 0x7f800000u) b &= 0xbfffffffu;
          std::memcpy(&x[i], &b, 4);
        } else {  // values around the f16 range, exponents -30..20
          x[i] = std::ldexp(std::normal_distribution<float>()(rng), static_cast<int>(rng() % 51) - 30);
        }
      }
      Dev<float> dx = upload(x, misalign);
      Dev<uint16_t> h = upload(std::vector<uint16_t>(x.size()), misalign), b = upload(std::vector<uint16_t>(x.size()), misalign);
      ASSERT_TRUE(cuda::to_f16(dx.get(), n, h.get(), stream_).is_ok());
      ASSERT_TRUE(cuda::to_bf16(dx.get(), n, b.get(), stream_).is_ok());
      sync();
      const std::vector<uint16_t> gh = h.host(), gb = b.host();
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(gh[i], f32_to_f16(x[i])) << "f16 n=" << n << " i=" << i << " x=" << x[i];
        ASSERT_EQ(gb[i], f32_to_bf16(x[i])) << "bf16 n=" << n << " i=" << i << " x=" << x[i];
      }
    }
  }
}

TEST_F(CudaElementwise, KvStoreWritesScatteredSlots) {
  std::mt19937 rng(17);
  const int64_t capacity = 40;
  for (cuda::KvType kv : {cuda::KvType::f32, cuda::KvType::f16}) {
    for (int64_t kv_dim : kSizes) {
      for (int64_t m : kRows) {
        for (bool with_pos : {true, false}) {
          const std::string what = "kv " + std::to_string(static_cast<int>(kv)) + " kv_dim " + std::to_string(kv_dim) +
                                   " m=" + std::to_string(m) + " with_pos " + std::to_string(with_pos);
          const std::vector<float> k = randn(static_cast<size_t>(m * kv_dim), rng);
          const std::vector<float> v = randn(static_cast<size_t>(m * kv_dim), rng);
          std::vector<int64_t> perm(capacity);
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng);
          const std::vector<int64_t> slots(perm.begin(), perm.begin() + m);
          std::vector<int32_t> pos(static_cast<size_t>(m));
          for (auto& p : pos) p = static_cast<int32_t>(rng() % 100000);
          const std::vector<int32_t> kv_pos0(capacity, -1);
          Dev<float> dk(k), dv(v);
          Dev<int64_t> dslots(slots);
          Dev<int32_t> dpos(pos), dkv_pos(kv_pos0);
          int32_t* kvp = with_pos ? dkv_pos.get() : nullptr;
          const size_t cache_n = static_cast<size_t>(capacity * kv_dim);
          std::vector<int32_t> want_pos(kv_pos0);
          if (with_pos)
            for (int64_t r = 0; r < m; ++r) want_pos[slots[r]] = pos[r];
          if (kv == cuda::KvType::f32) {
            const std::vector<float> kc0 = randn(cache_n, rng), vc0 = randn(cache_n, rng);
            Dev<float> kc(kc0), vc(vc0);
            ASSERT_TRUE(cuda::kv_store(dk.get(), dv.get(), m, kv_dim, dslots.get(), dpos.get(), kc.get(), vc.get(), kv,
                                       kvp, KvPages{}, stream_)
                            .is_ok());
            sync();
            std::vector<float> wk(kc0), wv(vc0);
            for (int64_t r = 0; r < m; ++r) {
              std::copy_n(k.begin() + r * kv_dim, kv_dim, wk.begin() + slots[r] * kv_dim);
              std::copy_n(v.begin() + r * kv_dim, kv_dim, wv.begin() + slots[r] * kv_dim);
            }
            expect_bits(kc.host(), wk, "k " + what);
            expect_bits(vc.host(), wv, "v " + what);
          } else {
            std::vector<uint16_t> kc0(cache_n), vc0(cache_n);
            for (auto& h : kc0) h = static_cast<uint16_t>(rng());
            for (auto& h : vc0) h = static_cast<uint16_t>(rng());
            Dev<uint16_t> kc(kc0), vc(vc0);
            ASSERT_TRUE(cuda::kv_store(dk.get(), dv.get(), m, kv_dim, dslots.get(), dpos.get(), kc.get(), vc.get(), kv,
                                       kvp, KvPages{}, stream_)
                            .is_ok());
            sync();
            std::vector<uint16_t> wk(kc0), wv(vc0);
            for (int64_t r = 0; r < m; ++r)
              for (int64_t c = 0; c < kv_dim; ++c) {
                wk[slots[r] * kv_dim + c] = f32_to_f16(k[r * kv_dim + c]);
                wv[slots[r] * kv_dim + c] = f32_to_f16(v[r * kv_dim + c]);
              }
            ASSERT_EQ(kc.host(), wk) << what;
            ASSERT_EQ(vc.host(), wv) << what;
          }
          ASSERT_EQ(dkv_pos.host(), want_pos) << what;
        }
      }
    }
  }
}

// rope_kv_store against its unfused composition on the device (rope of q, rope of k, kv_store of
// the rotated k and v): q and k rotated in place, the cache rows at scattered slots (the other
// slots, random bytes, untouched) and the positions; both modes and cache types, GQA, partial and
// zero rot_dim, a head_dim that is not a power of two, positions up to 100000.
TEST_F(CudaElementwise, RopeKvStoreEqualsRopeThenKvStore) {
  std::mt19937 rng(18);
  const int64_t capacity = 23;
  for (HeadShape sh : {HeadShape{64, 64, 9, 3}, HeadShape{128, 128, 32, 8}, HeadShape{128, 64, 5, 5},
                       HeadShape{80, 32, 4, 2}, HeadShape{128, 0, 2, 1}}) {
    Dev<float> freq(rope_inv_freq(sh));
    const int64_t kv_dim = sh.n_kv_heads * sh.head_dim;
    for (cuda::RopeMode mode : {cuda::RopeMode::interleaved, cuda::RopeMode::half})
      for (cuda::KvType kv : {cuda::KvType::f32, cuda::KvType::f16})
        for (int64_t m : kRows)
          for (bool with_pos : {true, false}) {
            const std::string what = "head_dim " + std::to_string(sh.head_dim) + " rot " + std::to_string(sh.rot_dim) +
                                     " heads " + std::to_string(sh.n_heads) + "/" + std::to_string(sh.n_kv_heads) +
                                     " mode " + std::to_string(static_cast<int>(mode)) + " kv " +
                                     std::to_string(static_cast<int>(kv)) + " m=" + std::to_string(m) + " with_pos " +
                                     std::to_string(with_pos);
            const std::vector<float> q = randn(static_cast<size_t>(m * sh.n_heads * sh.head_dim), rng);
            const std::vector<float> k = randn(static_cast<size_t>(m * kv_dim), rng);
            const std::vector<float> v = randn(static_cast<size_t>(m * kv_dim), rng);
            std::vector<int64_t> perm(capacity);
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), rng);
            const std::vector<int64_t> slots(perm.begin(), perm.begin() + m);
            std::vector<int32_t> pos(static_cast<size_t>(m));
            for (auto& p : pos) p = static_cast<int32_t>(rng() % 100001);
            pos[0] = 100000;
            const size_t cache_bytes = static_cast<size_t>(capacity * kv_dim) * (kv == cuda::KvType::f32 ? 4 : 2);
            std::vector<uint8_t> kc0(cache_bytes), vc0(cache_bytes);
            for (auto& b : kc0) b = static_cast<uint8_t>(rng());
            for (auto& b : vc0) b = static_cast<uint8_t>(rng());
            const std::vector<int32_t> kv_pos0(capacity, -1);
            Dev<int64_t> dslots(slots);
            Dev<int32_t> dpos(pos);
            Dev<float> dv(v);
            // Fused.
            Dev<float> q1(q), k1(k);
            Dev<uint8_t> kc1(kc0), vc1(vc0);
            Dev<int32_t> kp1(kv_pos0);
            const cuda::RopeKvArgs a =
                rope_kv_args(sh, m, mode, kv, dpos.get(), freq.get(), dslots.get(),
                             {q1.get(), k1.get(), dv.get(), kc1.get(), vc1.get(), with_pos ? kp1.get() : nullptr});
            const Status st = cuda::rope_kv_store(a, stream_);
            ASSERT_TRUE(st.is_ok()) << st.to_string();
            // Composition.
            Dev<float> q2(q), k2(k);
            Dev<uint8_t> kc2(kc0), vc2(vc0);
            Dev<int32_t> kp2(kv_pos0);
            ASSERT_TRUE(cuda::rope(q2.get(), m, sh.n_heads, sh.head_dim, dpos.get(), freq.get(), sh.rot_dim, mode,
                                   stream_)
                            .is_ok());
            ASSERT_TRUE(cuda::rope(k2.get(), m, sh.n_kv_heads, sh.head_dim, dpos.get(), freq.get(), sh.rot_dim, mode,
                                   stream_)
                            .is_ok());
            ASSERT_TRUE(cuda::kv_store(k2.get(), dv.get(), m, kv_dim, dslots.get(), dpos.get(), kc2.get(), vc2.get(),
                                       kv, with_pos ? kp2.get() : nullptr, KvPages{}, stream_)
                            .is_ok());
            sync();
            expect_close(q1.host(), q2.host(), 1e-6f, 1e-6f, "q " + what);
            expect_close(k1.host(), k2.host(), 1e-6f, 1e-6f, "k " + what);
            const float rel = kv == cuda::KvType::f32 ? 1e-6f : 2e-3f;  // f16: one rounding step apart at most
            expect_cache_close(kc1.host(), kc2.host(), kv, rel, "k cache " + what);
            expect_cache_close(vc1.host(), vc2.host(), kv, 0.0f, "v cache " + what);
            ASSERT_EQ(kp1.host(), kp2.host()) << what;
            if (HasFatalFailure()) return;
          }
  }
}

// Argument errors need no device: the launchers reject them before any CUDA call.
// rope_keys against rope() of the same rows: the first n of `capacity` cache slots rotated at
// their positions (scattered, up to 100000; slots at kNoKvPosition copied unrotated), slots past n
// left untouched in dst; both modes and cache types, GQA, partial and zero rot_dim, head_dim 80.
TEST_F(CudaElementwise, RopeKeysEqualsRopeOfEachSlot) {
  std::mt19937 rng(31);
  const int64_t capacity = 29;
  for (HeadShape sh : {HeadShape{64, 64, 9, 3}, HeadShape{128, 64, 5, 5}, HeadShape{80, 32, 4, 2},
                       HeadShape{128, 0, 2, 1}}) {
    Dev<float> freq(rope_inv_freq(sh));
    const int64_t kv_dim = sh.n_kv_heads * sh.head_dim;
    for (cuda::RopeMode mode : {cuda::RopeMode::interleaved, cuda::RopeMode::half})
      for (cuda::KvType kv : {cuda::KvType::f32, cuda::KvType::f16})
        for (int32_t n : {1, 17, 29}) {
          const std::string what = "head_dim " + std::to_string(sh.head_dim) + " rot " + std::to_string(sh.rot_dim) +
                                   " mode " + std::to_string(static_cast<int>(mode)) + " kv " +
                                   std::to_string(static_cast<int>(kv)) + " n=" + std::to_string(n);
          // The cache's rows as the f32 values they hold, and its bytes.
          std::vector<float> rows = randn(static_cast<size_t>(capacity * kv_dim), rng);
          std::vector<uint8_t> cache(rows.size() * (kv == cuda::KvType::f32 ? 4 : 2));
          for (size_t i = 0; i < rows.size(); ++i) {
            if (kv == cuda::KvType::f16) {
              const uint16_t h = f32_to_f16(rows[i]);
              rows[i] = f16_to_f32(h);
              std::memcpy(&cache[i * 2], &h, 2);
            } else {
              std::memcpy(&cache[i * 4], &rows[i], 4);
            }
          }
          std::vector<int32_t> pos(static_cast<size_t>(capacity));
          for (auto& p : pos) p = rng() % 5 == 0 ? cuda::kNoKvPosition : static_cast<int32_t>(rng() % 100001);
          std::vector<uint8_t> dst0(cache.size());
          for (auto& b : dst0) b = static_cast<uint8_t>(rng());
          Dev<uint8_t> dcache(cache), ddst(dst0);
          Dev<int32_t> dpos(pos), dn(std::vector<int32_t>{n});
          cuda::RopeKeysArgs a;
          a.k_cache = dcache.get();
          a.dst = ddst.get();
          a.kv = kv;
          a.kv_pos = dpos.get();
          a.n = dn.get();
          a.capacity = capacity;
          a.n_kv_heads = sh.n_kv_heads;
          a.head_dim = sh.head_dim;
          a.inv_freq = freq.get();
          a.rot_dim = sh.rot_dim;
          a.mode = mode;
          const Status st = cuda::rope_keys(a, stream_);
          ASSERT_TRUE(st.is_ok()) << st.to_string();
          // Reference: rope() of the slots that hold a position, one slot (row) at a time.
          std::vector<float> want = rows;
          for (int64_t j = 0; j < n; ++j) {
            if (pos[static_cast<size_t>(j)] == cuda::kNoKvPosition) continue;
            const std::vector<float> row(rows.begin() + j * kv_dim, rows.begin() + (j + 1) * kv_dim);
            Dev<float> drow(row);
            Dev<int32_t> p1(std::vector<int32_t>{pos[static_cast<size_t>(j)]});
            ASSERT_TRUE(cuda::rope(drow.get(), 1, sh.n_kv_heads, sh.head_dim, p1.get(), freq.get(), sh.rot_dim, mode,
                                   stream_)
                            .is_ok());
            const std::vector<float> r = drow.host();
            std::copy(r.begin(), r.end(), want.begin() + j * kv_dim);
          }
          sync();
          std::vector<uint8_t> want_bytes = dst0;  // slots >= n untouched
          for (int64_t i = 0; i < n * kv_dim; ++i) {
            if (kv == cuda::KvType::f16) {
              const uint16_t h = f32_to_f16(want[static_cast<size_t>(i)]);
              std::memcpy(&want_bytes[static_cast<size_t>(i) * 2], &h, 2);
            } else {
              std::memcpy(&want_bytes[static_cast<size_t>(i) * 4], &want[static_cast<size_t>(i)], 4);
            }
          }
          expect_cache_close(ddst.host(), want_bytes, kv, kv == cuda::KvType::f32 ? 1e-6f : 2e-3f, what);
          if (HasFatalFailure()) return;
        }
  }
}

TEST(CudaElementwiseArgs, BadArgumentsAreStatusesNamingTheValue) {
  float* const p = reinterpret_cast<float*>(uintptr_t{256});  // never dereferenced
  const int32_t* const ip = reinterpret_cast<const int32_t*>(uintptr_t{256});
  const int64_t* const lp = reinterpret_cast<const int64_t*>(uintptr_t{256});
  auto expect_bad = [](const Status& s, const std::string& needle) {
    EXPECT_EQ(s.code(), StatusCode::invalid_argument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message() << " should mention " << needle;
  };
  expect_bad(cuda::rope(p, 1, 2, 64, ip, p, 63, cuda::RopeMode::half, nullptr), "63");        // odd
  expect_bad(cuda::rope(p, 1, 2, 64, ip, p, 66, cuda::RopeMode::interleaved, nullptr), "66");  // > head_dim
  expect_bad(cuda::rope(p, -4, 2, 64, ip, p, 64, cuda::RopeMode::half, nullptr), "-4");
  expect_bad(cuda::rope(p, 1, 2, 64, ip, nullptr, 64, cuda::RopeMode::half, nullptr), "inv_freq");
  expect_bad(cuda::add(p, p, -1, nullptr), "-1");
  expect_bad(cuda::add(nullptr, p, 5, nullptr), "x");
  expect_bad(cuda::silu_mul(p, p, -2, nullptr), "-2");
  expect_bad(cuda::add_bias(p, p, -3, 4, nullptr), "-3");
  expect_bad(cuda::rmsnorm(p, p, 1e-5f, 2, -6, p, nullptr), "-6");
  expect_bad(cuda::rmsnorm(p, p, -1.0f, 2, 6, p, nullptr), "eps");
  expect_bad(cuda::embedding(p, cuda::WeightType::f16, -5, ip, 1, p, nullptr), "-5");
  expect_bad(cuda::to_f16(p, -7, p, nullptr), "-7");
  expect_bad(cuda::to_bf16(p, -8, p, nullptr), "-8");
  expect_bad(cuda::kv_store(p, p, -9, 8, lp, ip, p, p, cuda::KvType::f16, nullptr, KvPages{}, nullptr), "-9");
  expect_bad(cuda::kv_store(p, p, 1, -10, lp, ip, p, p, cuda::KvType::f16, nullptr, KvPages{}, nullptr), "-10");
  expect_bad(cuda::kv_store(p, p, 1, 8, lp, nullptr, p, p, cuda::KvType::f16, const_cast<int32_t*>(ip), KvPages{}, nullptr),
             "pos");
  cuda::RopeKvArgs ra;
  ra.q = ra.k = p;
  ra.v = p;
  ra.m = 1;
  ra.n_heads = 2;
  ra.n_kv_heads = 1;
  ra.head_dim = 63;
  ra.pos = ip;
  ra.inv_freq = p;
  ra.rot_dim = 32;
  ra.slots = lp;
  ra.k_cache = ra.v_cache = p;
  expect_bad(cuda::rope_kv_store(ra, nullptr), "63");  // odd head_dim
  ra.head_dim = 64;
  ra.rot_dim = 66;
  expect_bad(cuda::rope_kv_store(ra, nullptr), "66");
  ra.rot_dim = 64;
  ra.n_kv_heads = 0;
  expect_bad(cuda::rope_kv_store(ra, nullptr), "n_kv_heads");
  ra.n_kv_heads = 1;
  ra.slots = nullptr;
  expect_bad(cuda::rope_kv_store(ra, nullptr), "null");
  cuda::RopeKeysArgs rk;
  rk.k_cache = p;
  rk.dst = p;
  rk.kv_pos = ip;
  rk.n = ip;
  rk.capacity = 4;
  rk.n_kv_heads = 2;
  rk.head_dim = 63;
  rk.inv_freq = p;
  expect_bad(cuda::rope_keys(rk, nullptr), "head_dim 63");
  rk.head_dim = 64;
  rk.rot_dim = 66;
  expect_bad(cuda::rope_keys(rk, nullptr), "rot_dim 66");
  rk.rot_dim = 64;
  rk.n_kv_heads = 0;
  expect_bad(cuda::rope_keys(rk, nullptr), "n_kv_heads 0");
  rk.n_kv_heads = 2;
  rk.kv_pos = nullptr;
  expect_bad(cuda::rope_keys(rk, nullptr), "null");
}

TEST(CudaElementwiseArgs, EmptyWorkIsANoOp) {
  EXPECT_TRUE(cuda::add(nullptr, nullptr, 0, nullptr).is_ok());
  EXPECT_TRUE(cuda::silu_mul(nullptr, nullptr, 0, nullptr).is_ok());
  EXPECT_TRUE(cuda::add_bias(nullptr, nullptr, 0, 16, nullptr).is_ok());
  EXPECT_TRUE(cuda::rmsnorm(nullptr, nullptr, 1e-5f, 0, 16, nullptr, nullptr).is_ok());
  EXPECT_TRUE(cuda::embedding(nullptr, cuda::WeightType::bf16, 16, nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(cuda::to_f16(nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(cuda::to_bf16(nullptr, 0, nullptr, nullptr).is_ok());
  EXPECT_TRUE(cuda::rope(nullptr, 0, 4, 64, nullptr, nullptr, 64, cuda::RopeMode::half, nullptr).is_ok());
  EXPECT_TRUE(cuda::kv_store(nullptr, nullptr, 0, 64, nullptr, nullptr, nullptr, nullptr, cuda::KvType::f32, nullptr,
                             KvPages{}, nullptr)
                  .is_ok());
  cuda::RopeKvArgs ra;
  ra.n_heads = 4;
  ra.n_kv_heads = 2;
  ra.head_dim = 64;
  ra.rot_dim = 64;
  EXPECT_TRUE(cuda::rope_kv_store(ra, nullptr).is_ok());  // m = 0
}
