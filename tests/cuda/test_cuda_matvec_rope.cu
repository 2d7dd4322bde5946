// Runs on a GPU machine: the rope_kv epilogue of the matvec kernel and of the gq GEMV (q/k/v
// projections with the rotary embedding and the KV-cache store done as the sums finish) against
// its unfused composition on the device, the projection with store then rope_kv_store(), which
// test_cuda_matvec, test_cuda_gq_gemv and test_cuda_elementwise check against scalar references.
// Every weight type, with and without the folded RMSNorm, both rope modes and cache types, GQA,
// partial and zero rot_dim, head_dim 80 (matvec), m = 1..8 (every matvec configuration) and up to
// 16 (GEMV), positions up to 100000, scattered cache slots whose neighbours must stay untouched.
// Plus the epilogue's argument errors.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "lithe/core/half.h"
#include "lithe/core/status.h"
#include "lithe/kernels/cuda_device.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/cuda_ops.h"
#include "lithe/kernels/group_quant.h"

using namespace lithe;
using namespace lithe::cuda_test;

namespace {

// Random weights [n_out][n_in] in type t as raw 16-bit or 32-bit words (16-byte aligned on the device).
std::vector<uint32_t> weights_f32(int64_t n, std::mt19937& rng) {
  const std::vector<float> f = randn(static_cast<size_t>(n), rng, 0.0f, 0.05f);
  std::vector<uint32_t> w(f.size());
  for (size_t i = 0; i < f.size(); ++i) w[i] = bits(f[i]);
  return w;
}
std::vector<uint16_t> weights_16(cuda::WeightType t, int64_t n, std::mt19937& rng) {
  const std::vector<float> f = randn(static_cast<size_t>(n), rng, 0.0f, 0.05f);
  std::vector<uint16_t> w(f.size());
  for (size_t i = 0; i < f.size(); ++i) w[i] = t == cuda::WeightType::f16 ? f32_to_f16(f[i]) : f32_to_bf16(f[i]);
  return w;
}

class CudaMatvecRope : public CudaStreamTest {};

// The q/k/v projection kernels under test, for one case: `project(q, k, v, r)` runs the three
// projections into q, k, v with the rope_kv epilogue r, or with store when r is null.
using Project = std::function<Status(float* q, float* k, float* v, const cuda::MatvecRope* r)>;

// One case: the fused launch against project(store) then rope_kv_store(), on the same inputs.
void expect_fused_equals_composed(const HeadShape& sh, int64_t m, cuda::RopeMode mode, cuda::KvType kv,
                                  const Project& project, std::mt19937& rng, cudaStream_t stream,
                                  const std::string& what) {
  const int64_t nq = sh.n_heads * sh.head_dim, kv_dim = sh.n_kv_heads * sh.head_dim, capacity = 19;
  Dev<float> freq(rope_inv_freq(sh));
  std::vector<int64_t> perm(capacity);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const Dev<int64_t> slots(std::vector<int64_t>(perm.begin(), perm.begin() + m));
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 100001);
  pos[0] = 100000;
  const Dev<int32_t> dpos(pos);
  const size_t cache_bytes = static_cast<size_t>(capacity * kv_dim) * (kv == cuda::KvType::f32 ? 4 : 2);
  std::vector<uint8_t> cache0(cache_bytes);
  for (auto& b : cache0) b = static_cast<uint8_t>(rng());
  const std::vector<int32_t> kv_pos0(capacity, -1);
  const std::vector<float> y0(static_cast<size_t>(m * nq), 7.0f), ykv0(static_cast<size_t>(m * kv_dim), 7.0f);

  // Fused.
  Dev<float> q1(y0), k1(ykv0), v1(ykv0);
  Dev<uint8_t> kc1(cache0), vc1(cache0);
  Dev<int32_t> kp1(kv_pos0);
  // Fused and composed calls see the same arguments (the fused ones' outputs).
  const cuda::RopeKvArgs a1 = rope_kv_args(sh, m, mode, kv, dpos.get(), freq.get(), slots.get(),
                                           {q1.get(), k1.get(), v1.get(), kc1.get(), vc1.get(), kp1.get()});
  cuda::MatvecRope r;
  r.pos = a1.pos;
  r.inv_freq = a1.inv_freq;
  r.head_dim = a1.head_dim;
  r.rot_dim = a1.rot_dim;
  r.mode = a1.mode;
  r.slots = a1.slots;
  r.k_cache = a1.k_cache;
  r.v_cache = a1.v_cache;
  r.kv = a1.kv;
  r.kv_pos = a1.kv_pos;
  const Status st = project(q1.get(), k1.get(), v1.get(), &r);
  ASSERT_TRUE(st.is_ok()) << st.to_string() << " " << what;

  // Composition.
  Dev<float> q2(y0), k2(ykv0), v2(ykv0);
  Dev<uint8_t> kc2(cache0), vc2(cache0);
  Dev<int32_t> kp2(kv_pos0);
  const Status st2 = project(q2.get(), k2.get(), v2.get(), nullptr);
  ASSERT_TRUE(st2.is_ok()) << st2.to_string();
  const cuda::RopeKvArgs a = rope_kv_args(sh, m, mode, kv, dpos.get(), freq.get(), slots.get(),
                                          {q2.get(), k2.get(), v2.get(), kc2.get(), vc2.get(), kp2.get()});
  const Status st3 = cuda::rope_kv_store(a, stream);
  ASSERT_TRUE(st3.is_ok()) << st3.to_string();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << what;

  // The projections' sums are the same (each row reduced in the same order whichever slot holds
  // it); the rotations may round differently (contractions into FMAs).
  expect_close(q1.host(), q2.host(), 1e-6f, 1e-6f, "q " + what);
  expect_close(k1.host(), k2.host(), 1e-6f, 1e-6f, "k " + what);
  expect_bits(v1.host(), v2.host(), "v " + what);
  expect_cache_close(kc1.host(), kc2.host(), kv, kv == cuda::KvType::f32 ? 1e-6f : 2e-3f, "k cache " + what);
  expect_cache_close(vc1.host(), vc2.host(), kv, 0.0f, "v cache " + what);
  ASSERT_EQ(kp1.host(), kp2.host()) << what;
}

std::string case_name(const std::string& weights, const HeadShape& sh, cuda::RopeMode mode, cuda::KvType kv,
                      int64_t m, bool norm) {
  return weights + " head_dim " + std::to_string(sh.head_dim) + " rot " + std::to_string(sh.rot_dim) + " heads " +
         std::to_string(sh.n_heads) + "/" + std::to_string(sh.n_kv_heads) + " mode " +
         std::to_string(static_cast<int>(mode)) + " kv " + std::to_string(static_cast<int>(kv)) +
         " m=" + std::to_string(m) + (norm ? " norm" : "");
}

}  // namespace

TEST_F(CudaMatvecRope, EqualsMatvecThenRopeKvStore) {
  std::mt19937 rng(29);
  const int64_t n_in = 264;
  int cases = 0;
  for (cuda::WeightType t : {cuda::WeightType::f32, cuda::WeightType::f16, cuda::WeightType::bf16})
    for (HeadShape sh : {HeadShape{64, 64, 9, 3}, HeadShape{128, 128, 8, 8}, HeadShape{128, 64, 5, 5},
                         HeadShape{80, 32, 4, 2}, HeadShape{128, 0, 2, 1}}) {
      const int64_t nq = sh.n_heads * sh.head_dim, kv_dim = sh.n_kv_heads * sh.head_dim;
      // The three matrices, contiguous per matrix.
      const size_t es = t == cuda::WeightType::f32 ? 4 : 2;
      std::vector<Dev<uint8_t>> w;
      for (int64_t rows : {nq, kv_dim, kv_dim}) {
        std::vector<uint8_t> b(static_cast<size_t>(rows * n_in) * es);
        if (es == 4) {
          const auto v = weights_f32(rows * n_in, rng);
          std::memcpy(b.data(), v.data(), b.size());
        } else {
          const auto v = weights_16(t, rows * n_in, rng);
          std::memcpy(b.data(), v.data(), b.size());
        }
        w.emplace_back(b);
      }
      const Dev<float> norm_w(randn(static_cast<size_t>(n_in), rng, 1.0f, 0.3f));
      for (bool norm : {false, true})
        for (cuda::RopeMode mode : {cuda::RopeMode::interleaved, cuda::RopeMode::half})
          for (int64_t m : {1, 2, 3, 5, 8}) {
            const cuda::KvType kv = (m + cases) % 2 == 0 ? cuda::KvType::f16 : cuda::KvType::f32;
            ++cases;
            const char* tn = t == cuda::WeightType::f32 ? "f32" : t == cuda::WeightType::f16 ? "f16" : "bf16";
            const Dev<float> x(randn(static_cast<size_t>(m * n_in), rng));
            const cuda::MatvecNorm mn = norm ? cuda::MatvecNorm{norm_w.get(), 1e-5f} : cuda::MatvecNorm{};
            const Project project = [&](float* q, float* k, float* v, const cuda::MatvecRope* r) {
              const cuda::MatvecOut outs[3] = {{w[0].get(), nq, q}, {w[1].get(), kv_dim, k}, {w[2].get(), kv_dim, v}};
              return cuda::matvec(outs, 3, t, n_in, x.get(), m, r ? cuda::Epilogue::rope_kv : cuda::Epilogue::store,
                                  stream_, mn, r);
            };
            expect_fused_equals_composed(sh, m, mode, kv, project, rng, stream_, case_name(tn, sh, mode, kv, m, norm));
            if (HasFatalFailure()) return;
          }
    }
  EXPECT_EQ(cases, 3 * 5 * 2 * 2 * 5);
}

// The gq GEMV's rope_kv epilogue (cuda_gq.h: head_dim dividing its 128-row items) the same way:
// int4 g128 and int3 g64 act-order q/k/v, n_in 256 (no k-split) and 1024 (split: the last block of
// each item rotates, or block 0 of its cluster), m up to 16, GQA, partial and zero rot_dim.
TEST_F(CudaMatvecRope, GqGemvEqualsGemvThenRopeKvStore) {
  std::mt19937 rng(31);
  int cases = 0;
  for (int64_t n_in : {256, 1024})
    for (bool act_order : {false, true})
      for (HeadShape sh : {HeadShape{64, 64, 9, 3}, HeadShape{128, 128, 4, 4}, HeadShape{128, 64, 5, 1},
                           HeadShape{128, 0, 2, 1}}) {
        QuantFormat f;
        f.bits = act_order ? 3 : 4;
        f.group = act_order ? 64 : 128;
        f.sym = act_order;
        std::vector<cuda::PackedHost> packed;
        std::vector<Dev<uint8_t>> w;
        uint32_t seed = 40 + static_cast<uint32_t>(cases);
        for (int64_t rows : {sh.n_heads * sh.head_dim, sh.n_kv_heads * sh.head_dim, sh.n_kv_heads * sh.head_dim}) {
          auto p = cuda::pack_gemv(gq::random_matrix(f, rows, n_in, seed++, act_order));
          ASSERT_TRUE(p.is_ok()) << p.status().to_string();
          packed.push_back(std::move(p).value());
          w.emplace_back(packed.back().bytes);
        }
        const cuda::GemvOut probe[3] = {{&packed[0].desc, w[0].get(), nullptr},
                                        {&packed[1].desc, w[1].get(), nullptr},
                                        {&packed[2].desc, w[2].get(), nullptr}};
        const int64_t scratch_bytes = cuda::gemv_scratch_bytes(probe, 3, cuda::Epilogue::rope_kv);
        EXPECT_EQ(scratch_bytes > 0, n_in == 1024) << "the k-split of n_in " << n_in;
        const Dev<uint8_t> scratch(std::vector<uint8_t>(static_cast<size_t>(std::max<int64_t>(scratch_bytes, 16)), 0));
        const Dev<float> norm_w(randn(static_cast<size_t>(n_in), rng, 1.0f, 0.3f));
        for (bool norm : {false, true})
          for (cuda::RopeMode mode : {cuda::RopeMode::interleaved, cuda::RopeMode::half})
            for (int64_t m : {1, 3, 16}) {
              const cuda::KvType kv = (m + cases) % 2 == 0 ? cuda::KvType::f16 : cuda::KvType::f32;
              ++cases;
              const Dev<float> x(randn(static_cast<size_t>(m * n_in), rng));
              const cuda::MatvecNorm mn = norm ? cuda::MatvecNorm{norm_w.get(), 1e-5f} : cuda::MatvecNorm{};
              const Project project = [&](float* q, float* k, float* v, const cuda::MatvecRope* r) {
                const cuda::GemvOut outs[3] = {
                    {&packed[0].desc, w[0].get(), q}, {&packed[1].desc, w[1].get(), k}, {&packed[2].desc, w[2].get(), v}};
                return cuda::gemv(outs, 3, x.get(), m, r ? cuda::Epilogue::rope_kv : cuda::Epilogue::store,
                                  scratch.get(), scratch_bytes, stream_, mn, r);
              };
              expect_fused_equals_composed(sh, m, mode, kv, project, rng, stream_,
                                           case_name(format_name(f, n_in) + " n_in " + std::to_string(n_in), sh, mode,
                                                     kv, m, norm));
              if (HasFatalFailure()) return;
            }
      }
  EXPECT_EQ(cases, 2 * 2 * 4 * 2 * 2 * 3);
}

namespace {

// Rope arguments over a fake aligned device pointer (launchers check before touching the device).
cuda::MatvecRope fake_rope(float* p, int64_t head_dim) {
  cuda::MatvecRope r;
  r.pos = reinterpret_cast<const int32_t*>(p);
  r.inv_freq = p;
  r.head_dim = head_dim;
  r.rot_dim = head_dim;
  r.slots = reinterpret_cast<const int64_t*>(p);
  r.k_cache = p;
  r.v_cache = p;
  return r;
}

}  // namespace

TEST(CudaMatvecRopeArgs, ErrorsNameTheValue) {
  // Launchers check before touching the device: fake aligned pointers are enough.
  auto* p = reinterpret_cast<float*>(uintptr_t{1} << 20);
  const cuda::MatvecOut outs[3] = {{p, 256, p + 4096}, {p, 128, p + 8192}, {p, 128, p + 12288}};
  const cuda::MatvecRope r = fake_rope(p, 64);
  auto expect_bad = [&](const cuda::MatvecOut* o, int n, const cuda::MatvecRope* rr, const std::string& needle) {
    const Status st =
        cuda::matvec(o, n, cuda::WeightType::f16, 64, p + 16384, 1, cuda::Epilogue::rope_kv, nullptr, {}, rr);
    ASSERT_FALSE(st.is_ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_bad(outs, 2, &r, "n_outs = 2");
  expect_bad(outs, 3, nullptr, "no rope arguments");
  cuda::MatvecRope odd = r;
  odd.head_dim = 63;
  expect_bad(outs, 3, &odd, "head_dim 63");
  const cuda::MatvecOut uneven[3] = {{p, 256, p + 4096}, {p, 128, p + 8192}, {p, 192, p + 12288}};
  expect_bad(uneven, 3, &r, "192");
  cuda::MatvecRope rot = r;
  rot.rot_dim = 66;
  expect_bad(outs, 3, &rot, "rot_dim 66");
  cuda::MatvecRope null_cache = r;
  null_cache.k_cache = nullptr;
  expect_bad(outs, 3, &null_cache, "null");
}

TEST(CudaMatvecRopeArgs, GqGemvErrorsNameTheValue) {
  // Checked before the device is touched: packed descriptors with fake aligned device pointers.
  auto* p = reinterpret_cast<float*>(uintptr_t{1} << 20);
  QuantFormat f;
  f.bits = 4;
  f.group = 128;
  auto packed = cuda::pack_gemv(gq::random_matrix(f, 96, 256, 1, false));
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  const PackedWeight& d = packed.value().desc;
  const cuda::GemvOut outs[3] = {{&d, p, p + 4096}, {&d, p, p + 8192}, {&d, p, p + 12288}};
  const cuda::MatvecRope r = fake_rope(p, 96);
  auto expect_bad = [&](int n, const cuda::MatvecRope* rr, const std::string& needle) {
    const Status st = cuda::gemv(outs, n, p + 16384, 1, cuda::Epilogue::rope_kv, p, 1 << 20, nullptr, {}, rr);
    ASSERT_FALSE(st.is_ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_bad(2, &r, "n_outs = 2");
  expect_bad(3, nullptr, "no rope arguments");
  expect_bad(3, &r, "head_dim 96 does not divide the 128 rows");
  cuda::MatvecRope wide = r;
  wide.head_dim = 48;  // whole heads, but rot_dim 96 exceeds it
  expect_bad(3, &wide, "rot_dim 96");
}

