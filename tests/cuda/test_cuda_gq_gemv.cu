// Runs on a GPU machine: the group-quantized GEMV (cuda_gq.h: pack_gemv, gemv, gemv_linear,
// gemv_dequantize_f16) against the scalar oracle gq::reference_linear / gq::dequantize, on fresh
// random matrices (gq::random_matrix, fixed seeds): every format (int2/3/4/8, sym and asym, group
// 32/64/128, a group of 96, per channel), act-order, 2:4-sparse matrices (int4 on sparse tensor
// cores, the others and group 32 packed dense), short last groups,
// odd shapes and the real ones, m = 1..16, store and accumulate; fused launches (3 matrices, swiglu,
// a folded RMSNorm); rows that do not depend on m; the k-split's counters left at zero and its sums
// in thread-block clusters where they fit; deferred residual sums (GemvResidual) against direct
// ones; x's producer's ready flags (GemvReady) holding a launch until x lands. With LITHE_TEST_GEMV_HASH set the outputs are printed as hashes (two settings compared bit
// for bit). The reference is computed once per matrix for the largest m (the smaller m use its
// first rows).
// Tolerance: 1e-5 |want| + 1e-6 max|W| sum|x_i| (f32 sums in another order; a lost or doubled
// 32-column unit is ~1e-2 of that scale). Rows >= m and y past [m][n_out] must stay untouched.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/group_quant.h"

using namespace lithe;

namespace {

constexpr float kSentinel = 1.25e30f;  // marks memory the kernel must not write

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess) << bytes; }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};
void h2d(const DevMem& d, const void* h, size_t bytes) {
  ASSERT_EQ(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}
void d2h(void* h, const DevMem& d, size_t bytes) { ASSERT_EQ(cudaMemcpy(h, d.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess); }

QuantFormat fmt(int bits, int64_t group, bool sym, bool sparse = false) {
  QuantFormat f;
  f.bits = bits;
  f.group = group;
  f.sym = sym;
  f.sparse24 = sparse;
  return f;
}

std::string describe(const gq::Matrix& m) {
  return format_name(m.fmt, m.n_in) + " [" + std::to_string(m.n_out) + " x " + std::to_string(m.n_in) + "]" +
         (m.perm.empty() ? "" : " act-order");
}

// A packed matrix and its device copy.
struct DevMatrix {
  cuda::PackedHost host;
  std::unique_ptr<DevMem> dev;
};
DevMatrix upload(const gq::Matrix& m) {
  DevMatrix d;
  auto packed = cuda::pack_gemv(m);
  EXPECT_TRUE(packed.is_ok()) << packed.status().to_string();
  if (!packed.is_ok()) return d;
  d.host = std::move(packed).value();
  EXPECT_EQ(d.host.desc.layout, cuda::kLayoutGemv);
  // 2:4 int4 with n_in and group multiples of 64 runs on sparse tensor cores, the rest dense.
  const bool sparse = m.fmt.sparse24 && m.fmt.bits == 4 && m.n_in % 64 == 0 && m.fmt.group % 64 == 0;
  EXPECT_EQ(d.host.desc.fmt.sparse24, sparse) << describe(m);
  EXPECT_EQ(static_cast<int64_t>(d.host.bytes.size()), d.host.desc.bytes);
  d.dev = std::make_unique<DevMem>(d.host.bytes.size());
  h2d(*d.dev, d.host.bytes.data(), d.host.bytes.size());
  return d;
}

// Zeroed device scratch for a gemv launch over outs (gemv_scratch_bytes).
struct Scratch {
  int64_t bytes;
  DevMem mem;
  Scratch(const cuda::GemvOut* outs, int n, cuda::Epilogue e)
      : bytes(cuda::gemv_scratch_bytes(outs, n, e)), mem(static_cast<size_t>(bytes)) {
    EXPECT_EQ(cudaMemset(mem.p, 0, static_cast<size_t>(std::max<int64_t>(bytes, 16))), cudaSuccess);
  }
  // The scratch must be all zero after every launch (its counters start the next one, of any shape).
  void expect_zeroed() const { expect_zeroed(mem.p, bytes); }
  static void expect_zeroed(const void* p, int64_t n) {
    std::vector<uint32_t> c(static_cast<size_t>(n / 4));
    EXPECT_EQ(cudaMemcpy(c.data(), p, c.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t k = 0; k < c.size(); ++k) ASSERT_EQ(c[k], 0u) << "scratch word " << k << " left non-zero";
  }
};

// One zeroed scratch buffer shared by every fused launch of the tests, as the engine shares one:
// launches of different shapes must leave it all zero for each other.
struct SharedScratch {
  static constexpr int64_t kBytes = 8 << 20;
  void* p = nullptr;
  SharedScratch() {
    EXPECT_EQ(cudaMalloc(&p, kBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, kBytes), cudaSuccess);
  }
  static SharedScratch& get() {
    static SharedScratch s;
    return s;
  }
};

// gemv_linear for each m of ms (store, then accumulate into random y) against the reference.
void check_linear(const gq::Matrix& mat, const std::vector<int64_t>& ms, cudaStream_t s, uint32_t seed) {
  SCOPED_TRACE(describe(mat));
  const int64_t n_in = mat.n_in, n_out = mat.n_out;
  const int64_t rows = *std::max_element(ms.begin(), ms.end());
  std::mt19937 rng(seed);
  const std::vector<float> x = cuda_test::randn(static_cast<size_t>(rows * n_in), rng);
  std::vector<float> ref(static_cast<size_t>(rows * n_out));
  gq::reference_linear(mat, x.data(), rows, ref.data());
  float max_scale = 0;
  for (uint16_t h : mat.scales) max_scale = std::max(max_scale, std::fabs(f16_to_f32(h)));
  const double max_w = static_cast<double>(max_scale) * mat.maxq();
  std::vector<double> x_abs(static_cast<size_t>(rows), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < n_in; ++k) x_abs[static_cast<size_t>(i)] += std::fabs(x[static_cast<size_t>(i * n_in + k)]);

  const DevMatrix w = upload(mat);
  ASSERT_TRUE(w.dev != nullptr);
  const cuda::GemvOut out{&w.host.desc, w.dev->p, nullptr};
  const Scratch scratch(&out, 1, cuda::Epilogue::store);
  DevMem dx(x.size() * 4);
  h2d(dx, x.data(), x.size() * 4);
  const size_t y_len = static_cast<size_t>((rows + 1) * n_out + 3);
  DevMem dy(y_len * 4);
  std::normal_distribution<float> nd;
  for (int64_t m : ms)
    for (bool acc : {false, true}) {
      SCOPED_TRACE("m = " + std::to_string(m) + (acc ? " accumulate" : " store"));
      std::vector<float> y0(y_len, kSentinel);
      if (acc)
        for (size_t k = 0; k < static_cast<size_t>(m * n_out); ++k) y0[k] = nd(rng);
      h2d(dy, y0.data(), y_len * 4);
      const Status st = cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, dy.as<float>(), acc,
                                          scratch.mem.p, scratch.bytes, s);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      scratch.expect_zeroed();
      std::vector<float> y(y_len);
      d2h(y.data(), dy, y_len * 4);
      cuda_test::print_hash_if("LITHE_TEST_GEMV_HASH", "gemv hash", describe(mat) + (acc ? " accumulate" : " store"), m,
                               y);  // two settings, bit for bit
      for (size_t k = static_cast<size_t>(m * n_out); k < y_len; ++k)
        ASSERT_EQ(y[k], kSentinel) << "write past y[m][n_out] at " << k;
      int bad = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t r = 0; r < n_out; ++r) {
          const size_t k = static_cast<size_t>(i * n_out + r);
          const double want = ref[k] + (acc ? static_cast<double>(y0[k]) : 0.0);
          const double tol = 1e-5 * std::fabs(want) + 1e-6 * max_w * x_abs[static_cast<size_t>(i)] +
                             (acc ? 1e-6 * std::fabs(y0[k]) : 0.0);
          if (!(std::fabs(y[k] - want) <= tol) && ++bad <= 5)
            ADD_FAILURE() << "y[" << i << "][" << r << "] = " << y[k] << ", expected " << want << " (tol " << tol
                          << ")";
        }
      ASSERT_EQ(bad, 0) << "wrong outputs";
    }
}

// RMSNorm of each x row as rmsnorm_kernel defines it, x / sqrt(mean(x^2) + eps) * g, in double.
std::vector<float> rmsnorm_rows(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& g,
                                float eps) {
  std::vector<float> y(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t k = 0; k < n; ++k) ss += static_cast<double>(x[static_cast<size_t>(i * n + k)]) * x[static_cast<size_t>(i * n + k)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t k = 0; k < n; ++k) {
      const size_t q = static_cast<size_t>(i * n + k);
      y[q] = static_cast<float>(x[q] * inv * g[static_cast<size_t>(k)]);
    }
  }
  return y;
}

// One fused gemv launch over mats (one format and n_in) with epilogue e (store, accumulate or
// swiglu) and optionally a folded RMSNorm, for each m of ms, against the reference on rmsnorm(x).
void check_fused(const std::vector<gq::Matrix>& mats, cuda::Epilogue e, bool norm, const std::vector<int64_t>& ms,
                 cudaStream_t s, uint32_t seed) {
  SCOPED_TRACE(describe(mats[0]) + " x " + std::to_string(mats.size()) + (norm ? " norm" : "") + " epilogue " +
               std::to_string(static_cast<int>(e)));
  const int64_t n_in = mats[0].n_in, rows = *std::max_element(ms.begin(), ms.end());
  const int n = static_cast<int>(mats.size());
  std::mt19937 rng(seed);
  const std::vector<float> x = cuda_test::randn(static_cast<size_t>(rows * n_in), rng);
  std::vector<float> g(static_cast<size_t>(n_in));
  std::uniform_real_distribution<float> ud(0.5f, 1.5f);
  for (float& v : g) v = ud(rng);
  const float eps = 1e-5f;
  const std::vector<float> xn = norm ? rmsnorm_rows(x, rows, n_in, g, eps) : x;
  std::vector<double> x_abs(static_cast<size_t>(rows), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < n_in; ++k) x_abs[static_cast<size_t>(i)] += std::fabs(xn[static_cast<size_t>(i * n_in + k)]);
  std::vector<std::vector<float>> ref(mats.size());
  std::vector<DevMatrix> w(mats.size());
  std::vector<std::unique_ptr<DevMem>> dy(mats.size());
  std::vector<cuda::GemvOut> outs(mats.size());
  double max_w = 0;
  for (int j = 0; j < n; ++j) {
    ref[j].resize(static_cast<size_t>(rows * mats[j].n_out));
    gq::reference_linear(mats[j], xn.data(), rows, ref[j].data());
    for (uint16_t h : mats[j].scales) max_w = std::max(max_w, std::fabs(static_cast<double>(f16_to_f32(h))) * mats[j].maxq());
    w[j] = upload(mats[j]);
    ASSERT_TRUE(w[j].dev != nullptr);
    dy[j] = std::make_unique<DevMem>(static_cast<size_t>(rows * mats[j].n_out) * 4);
    outs[j] = {&w[j].host.desc, w[j].dev->p, dy[j]->as<float>()};
  }
  const int64_t scratch_bytes = cuda::gemv_scratch_bytes(outs.data(), n, e);
  ASSERT_LE(scratch_bytes, SharedScratch::kBytes);
  void* const scratch = SharedScratch::get().p;
  DevMem dx(x.size() * 4), dg(g.size() * 4);
  h2d(dx, x.data(), x.size() * 4);
  h2d(dg, g.data(), g.size() * 4);
  cuda::MatvecNorm mn;
  if (norm) mn = {dg.as<float>(), eps};
  std::normal_distribution<float> nd;
  for (int64_t m : ms) {
    SCOPED_TRACE("m = " + std::to_string(m));
    std::vector<std::vector<float>> y0(mats.size());
    for (int j = 0; j < n; ++j) {
      y0[j].assign(static_cast<size_t>(rows * mats[j].n_out), 0.f);
      for (float& v : y0[j]) v = nd(rng);
      h2d(*dy[j], y0[j].data(), y0[j].size() * 4);
    }
    const Status st = cuda::gemv(outs.data(), n, dx.as<float>(), m, e, scratch, SharedScratch::kBytes, s, mn);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    Scratch::expect_zeroed(scratch, scratch_bytes);
    int bad = 0;
    for (int j = 0; j < n; ++j) {
      std::vector<float> y(y0[j].size());
      d2h(y.data(), *dy[j], y.size() * 4);
      cuda_test::print_hash_if("LITHE_TEST_GEMV_HASH", "gemv hash",
                               describe(mats[j]) + " fused " + std::to_string(static_cast<int>(e)) + (norm ? " norm" : ""), m, y);
      const int64_t n_out = mats[j].n_out;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t r = 0; r < n_out; ++r) {
          const size_t k = static_cast<size_t>(i * n_out + r);
          const double base = 1e-6 * max_w * x_abs[static_cast<size_t>(i)];
          double want = ref[j][k], tol = 1e-5 * std::fabs(want) + base;
          if (i >= m || (e == cuda::Epilogue::swiglu && j == 1)) {
            want = y0[j][k];  // rows past m and the up output are untouched
            tol = 0;
          } else if (e == cuda::Epilogue::accumulate) {
            want += y0[j][k];
            tol += 1e-6 * std::fabs(y0[j][k]);
          } else if (e == cuda::Epilogue::swiglu) {
            const double gt = ref[0][k], ut = ref[1][k], sg = gt / (1 + std::exp(-gt));
            want = sg * ut;
            tol = 1.1 * std::fabs(ut) * (1e-5 * std::fabs(gt) + base) + std::fabs(gt) * (1e-5 * std::fabs(ut) + base) +
                  1e-6 * std::fabs(want);
          }
          if (!(std::fabs(y[k] - want) <= tol) && ++bad <= 5)
            ADD_FAILURE() << "y" << j << "[" << i << "][" << r << "] = " << y[k] << ", expected " << want << " (tol "
                          << tol << ")";
        }
    }
    ASSERT_EQ(bad, 0) << "wrong outputs";
  }
}

// gemv_dequantize_f16 against f16(gq::dequantize): s * (c - zero) is exact in f32, so the f16
// values must match bit for bit.
void check_dequantize(const gq::Matrix& mat, cudaStream_t s) {
  SCOPED_TRACE(describe(mat));
  const std::vector<float> ref = gq::dequantize(mat);
  const DevMatrix w = upload(mat);
  ASSERT_TRUE(w.dev != nullptr);
  const size_t n = ref.size();
  DevMem out((n + 8) * 2);
  std::vector<uint16_t> got(n + 8, 0xfbffu);  // the tail must stay
  h2d(out, got.data(), got.size() * 2);
  const Status st = cuda::gemv_dequantize_f16(w.host.desc, w.dev->p, out.p, s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  d2h(got.data(), out, got.size() * 2);
  int bad = 0;
  for (size_t k = 0; k < n; ++k)
    if (got[k] != f32_to_f16(ref[k]) && ++bad <= 5)
      ADD_FAILURE() << "W[" << k / mat.n_in << "][" << k % mat.n_in << "] = " << f16_to_f32(got[k]) << ", expected "
                    << ref[k];
  EXPECT_EQ(bad, 0);
  for (size_t k = n; k < got.size(); ++k) EXPECT_EQ(got[k], 0xfbffu) << "write past the matrix at " << k;
}

class CudaGqGemv : public cuda_test::CudaStreamTest {};

const std::vector<int64_t> kAllM = {1, 2, 3, 4, 5, 8, 9, 16};

}  // namespace

// bits x sym x group (32, 64, 128, per channel) x act-order on one shape (n_out not a multiple of
// the 16-row tile), every m.
TEST_F(CudaGqGemv, EveryFormat) {
  uint32_t seed = 1;
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {false, true})
      for (int64_t group : {32, 64, 128, 256})
        for (bool act : {false, true}) {
          const gq::Matrix m = gq::random_matrix(fmt(bits, group, sym), 72, 256, seed, act);
          check_linear(m, kAllM, stream_, seed++);
          if (HasFatalFailure()) return;
        }
}

// Shapes at the edges: one unit, half a chunk (int2/int3 when n_in % 64 == 32), one row, a row
// count one past a tile, groups that are not powers of two (96: the unit -> group division),
// short last groups (576 in groups of 128, 480 in groups of 96 / 128), 2:4-sparse matrices.
TEST_F(CudaGqGemv, OddShapes) {
  struct Shape {
    int64_t n_out, n_in, group;
  };
  const std::vector<Shape> shapes = {{1, 32, 32},    {33, 96, 32},   {33, 96, 96},  {65, 480, 96},
                                     {31, 480, 128}, {40, 576, 128}, {7, 160, 160}, {97, 64, 64}};
  uint32_t seed = 100;
  for (const Shape& sh : shapes)
    for (int bits : {2, 3, 4, 8})
      for (bool act : {false, true}) {
        const gq::Matrix m = gq::random_matrix(fmt(bits, sh.group, bits == 3), sh.n_out, sh.n_in, seed, act);
        check_linear(m, {1, 3, 8, 12}, stream_, seed++);
        if (HasFatalFailure()) return;
      }
  for (int bits : {2, 4, 8})
    for (bool act : {false, true}) {
      const gq::Matrix m = gq::random_matrix(fmt(bits, 128, false, true), 48, 512, seed, act);
      ASSERT_TRUE(gq::is_2to4(m));
      check_linear(m, {1, 2, 5}, stream_, seed++);
      if (HasFatalFailure()) return;
    }
}

// 2:4 sparse int4 on sparse tensor cores: sym and asym, groups 64 / 128 / 192 / per channel,
// act-order, every m; n_in 448 ends in half a chunk (224 code columns), 40 rows end in a partial
// tile; a row with fewer than two non-zero weights in a quad (code == zero point) and all-zero
// rows. Group 32 and int4 with n_in % 64 != 0 run dense (upload checks which).
TEST_F(CudaGqGemv, SparseInt4) {
  uint32_t seed = 700;
  for (bool sym : {false, true})
    for (int64_t group : {64, 128, 192, 448})
      for (bool act : {false, true}) {
        gq::Matrix m = gq::random_matrix(fmt(4, group, sym, true), 40, 448, seed, act);
        for (int64_t k = 0; k < m.n_in; ++k) {  // row 3: only column 1 of each quad kept; row 5: none
          const size_t g3 = static_cast<size_t>(3 * m.n_groups() + k / group), g5 = static_cast<size_t>(5 * m.n_groups() + k / group);
          m.codes[static_cast<size_t>(3 * m.n_in + k)] = k % 4 == 1 ? 15 : m.zeros[g3];
          m.codes[static_cast<size_t>(5 * m.n_in + k)] = m.zeros[g5];
        }
        ASSERT_TRUE(gq::is_2to4(m));
        check_linear(m, kAllM, stream_, seed++);
        if (HasFatalFailure()) return;
      }
  for (const auto& [group, n_in] : std::vector<std::pair<int64_t, int64_t>>{{32, 256}, {96, 480}}) {
    const gq::Matrix m = gq::random_matrix(fmt(4, group, false, true), 24, n_in, seed, false);
    check_linear(m, {1, 4}, stream_, seed++);  // dense
    if (HasFatalFailure()) return;
  }
}

// The real shapes (n_in x n_out), one format each, m up to 16 (chunk tails: 11008 = 172 chunks of
// int4, 86 of int2 and int3 (128 columns each: the last one half padding)); act-order at n_in 11008 and 14336 stages large gathered ranges of x.
TEST_F(CudaGqGemv, RealShapes) {
  struct Shape {
    int64_t n_in, n_out;
    QuantFormat f;
    bool act;
  };
  const std::vector<Shape> shapes = {
      {4096, 4096, fmt(4, 128, false), false},   {4096, 11008, fmt(3, 128, true), false},
      {11008, 4096, fmt(2, 64, false), true},    {4096, 14336, fmt(8, 4096, true), false},
      {14336, 4096, fmt(4, 128, false), true},   {576, 1536, fmt(4, 128, false), false},
      {1536, 576, fmt(2, 32, false), true},      {576, 192, fmt(3, 576, false), false},
      // Llama-2-7B's down projection as the decode benchmark runs it (its m = 16 row once read wrong
      // there against cuBLAS: bench/RESULTS.md, fourteenth session).
      {11008, 4096, fmt(4, 128, false), false},
      // 2:4 sparse int4 (SparseGPT 2:4 + GPTQ): 11008 = 86 chunks of 128 columns.
      {4096, 4096, fmt(4, 128, true, true), false},     {11008, 4096, fmt(4, 128, false, true), true},
      {4096, 11008, fmt(4, 4096, true, true), false},   {4096, 14336, fmt(4, 64, false, true), false},
  };
  uint32_t seed = 200;
  // (At m = 16 the three 14336 shapes stage x in passes: 2048, 1792 and 2048 columns a block would
  // take 128, 112 and 128 KiB of shared memory; gq_gemv_grid.cuh: pass_of.)
  for (const Shape& sh : shapes) {
    const gq::Matrix m = gq::random_matrix(sh.f, sh.n_out, sh.n_in, seed, sh.act);
    check_linear(m, {1, 3, 8, 16}, stream_, seed++);
    if (HasFatalFailure()) return;
  }
}

// Fused launches: q/k/v-like triples (n_out 96, 32, 33) and gate/up pairs (swiglu), with and
// without a folded RMSNorm, accumulate with a norm, act-order triples; n_in 4096 splits k over
// several blocks (their partial sums meet in scratch), n_in 576 does not; one scratch buffer for
// all (launches of other shapes, as in the engine), all zero after each. The n_in 4096 triple
// (1365 rows: 4096 / 3) is the shape of CudaBackend.GqProjectionsMatchCpu, which found a
// scratch left non-zero.
TEST_F(CudaGqGemv, FusedMatricesEpiloguesAndNorm) {
  uint32_t seed = 400;
  const std::vector<QuantFormat> fmts = {fmt(4, 128, false), fmt(3, 64, true), fmt(2, 32, false), fmt(8, 4096, true),
                                         fmt(4, 128, false, true)};
  for (const QuantFormat& f0 : fmts)
    for (int64_t n_in : {576, 4096}) {
      QuantFormat f = f0;
      if (f.group > n_in) f.group = n_in;
      for (bool act : {false, true}) {
        const int64_t n_kv = n_in == 4096 ? 1365 : 32;
        const std::vector<gq::Matrix> qkv = {gq::random_matrix(f, 96, n_in, seed, act),
                                             gq::random_matrix(f, n_kv, n_in, seed + 1, act),
                                             gq::random_matrix(f, n_kv + 1, n_in, seed + 2, act)};
        for (bool norm : {false, true}) {
          check_fused(qkv, cuda::Epilogue::store, norm, {1, 3, 8, 13}, stream_, seed++);
          if (HasFatalFailure()) return;
        }
        check_fused({qkv[0]}, cuda::Epilogue::accumulate, true, {2, 5}, stream_, seed++);
        if (HasFatalFailure()) return;
      }
      const std::vector<gq::Matrix> gate_up = {gq::random_matrix(f, 72, n_in, seed, false),
                                               gq::random_matrix(f, 72, n_in, seed + 1, false)};
      for (bool norm : {false, true}) {
        check_fused(gate_up, cuda::Epilogue::swiglu, norm, {1, 4, 8, 16}, stream_, seed++);
        if (HasFatalFailure()) return;
      }
    }
}

// Deferred residual sums (cuda_gq.h: GemvResidual) against the direct ones over a layer's chain:
// o accumulating into the residual y, gate/up reading y under a folded norm, down accumulating, q
// reading y; deferred, o and down add into accumulators (down folding o's into y) and gate/up and q
// read y + acc, then gemv_fold. y must stay untouched by o; the outputs agree with the direct chain
// to f32 rounding (a lost or doubled block's sums would be ~1/ks of them); the accumulators end at
// zero; two deferred runs give the same bits (integer sums). A partial sum past 2^20 poisons its
// row of y (NaN) and no other. Int4, act-order int3 and act-order 2:4 int4 (x gathered by perm), 1, 5
// and 16 rows.
TEST_F(CudaGqGemv, DeferredResidualSumsMatchTheDirectOnes) {
  constexpr int64_t d = 2048, ff = 5504, kRowsMax = 16;
  uint32_t seed = 1200;
  for (const auto& [f, act] : std::vector<std::pair<QuantFormat, bool>>{
           {fmt(4, 128, false), false}, {fmt(3, 64, true), true}, {fmt(4, 128, true, true), true}}) {
    const gq::Matrix mo = gq::random_matrix(f, d, d, seed++, act), mg = gq::random_matrix(f, ff, d, seed++, false),
                     mu = gq::random_matrix(f, ff, d, seed++, false), md = gq::random_matrix(f, d, ff, seed++, act),
                     mq = gq::random_matrix(f, d, d, seed++, act);
    SCOPED_TRACE(describe(mo));
    const DevMatrix wo = upload(mo), wg = upload(mg), wu = upload(mu), wd = upload(md), wq = upload(mq);
    ASSERT_TRUE(wo.dev && wg.dev && wu.dev && wd.dev && wq.dev);
    std::mt19937 rng(seed++);
    const std::vector<float> y0 = cuda_test::randn(static_cast<size_t>(kRowsMax * d), rng, 0.f, 3.f),
                             xa = cuda_test::randn(static_cast<size_t>(kRowsMax * d), rng);
    std::vector<float> g = cuda_test::randn(static_cast<size_t>(d), rng, 1.f, 0.2f);
    DevMem dy(y0.size() * 4), dxa(xa.size() * 4), dg(g.size() * 4), dh(static_cast<size_t>(kRowsMax * ff) * 4),
        du(static_cast<size_t>(kRowsMax * ff) * 4), dq(static_cast<size_t>(kRowsMax * d) * 4),
        dacc(static_cast<size_t>(2 * kRowsMax * d) * 8);
    h2d(dxa, xa.data(), xa.size() * 4);
    h2d(dg, g.data(), g.size() * 4);
    int64_t* const acc0 = dacc.as<int64_t>();
    int64_t* const acc1 = acc0 + kRowsMax * d;
    const cuda::MatvecNorm norm{dg.as<float>(), 1e-5f};
    void* const scratch = SharedScratch::get().p;
    const cuda::GemvOut o{&wo.host.desc, wo.dev->p, dy.as<float>()}, dn{&wd.host.desc, wd.dev->p, dy.as<float>()},
        gu[2] = {{&wg.host.desc, wg.dev->p, dh.as<float>()}, {&wu.host.desc, wu.dev->p, du.as<float>()}},
        q{&wq.host.desc, wq.dev->p, dq.as<float>()};
    struct Out {
      std::vector<float> y, h, q;
    };
    // The chain at m rows; deferred: through the accumulators, y folded at the end. y_after_o: y
    // right after o (read past the kernels).
    auto chain = [&](int64_t m, bool deferred, std::vector<float>* y_after_o) {
      Out r;
      h2d(dy, y0.data(), y0.size() * 4);
      EXPECT_EQ(cudaMemset(dacc.p, 0, static_cast<size_t>(2 * kRowsMax * d) * 8), cudaSuccess);
      auto run = [&](const cuda::GemvOut* outs, int n, const float* x, cuda::Epilogue e, const cuda::MatvecNorm& mn,
                     const cuda::GemvResidual& res) {
        const Status st = cuda::gemv(outs, n, x, m, e, scratch, SharedScratch::kBytes, stream_, mn, nullptr, &res);
        EXPECT_TRUE(st.is_ok()) << st.to_string();
      };
      cuda::GemvResidual r_o, r_gu, r_dn, r_q;
      if (deferred) r_o.add = acc0, r_gu.in = acc0, r_dn.add = acc1, r_dn.fold = acc0, r_q.in = acc1;
      run(&o, 1, dxa.as<float>(), cuda::Epilogue::accumulate, {}, r_o);
      if (y_after_o != nullptr) {
        EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        y_after_o->resize(static_cast<size_t>(m * d));
        d2h(y_after_o->data(), dy, y_after_o->size() * 4);
      }
      run(gu, 2, dy.as<float>(), cuda::Epilogue::swiglu, norm, r_gu);
      run(&dn, 1, dh.as<float>(), cuda::Epilogue::accumulate, {}, r_dn);
      run(&q, 1, dy.as<float>(), cuda::Epilogue::store, norm, r_q);
      if (deferred) EXPECT_TRUE(cuda::gemv_fold(dy.as<float>(), acc1, m * d, stream_).is_ok());
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      r.y.resize(static_cast<size_t>(m * d));
      r.h.resize(static_cast<size_t>(m * ff));
      r.q.resize(static_cast<size_t>(m * d));
      d2h(r.y.data(), dy, r.y.size() * 4);
      d2h(r.h.data(), dh, r.h.size() * 4);
      d2h(r.q.data(), dq, r.q.size() * 4);
      Scratch::expect_zeroed(dacc.p, 2 * kRowsMax * d * 8);
      return r;
    };
    auto close = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
      float mx = 0.f;
      for (float v : want) mx = std::max(mx, std::fabs(v));
      int bad = 0;
      for (size_t k = 0; k < want.size(); ++k)
        if (!(std::fabs(got[k] - want[k]) <= 1e-5f * mx) && ++bad <= 5)
          ADD_FAILURE() << what << "[" << k << "] = " << got[k] << ", direct " << want[k] << " (max " << mx << ")";
      EXPECT_EQ(bad, 0) << what;
    };
    for (int64_t m : {1, 5, 16}) {
      SCOPED_TRACE("m = " + std::to_string(m));
      std::vector<float> after_o;
      const Out direct = chain(m, false, nullptr), deferred = chain(m, true, &after_o);
      if (HasFatalFailure()) return;
      EXPECT_TRUE(std::equal(after_o.begin(), after_o.end(), y0.begin())) << "o wrote y";
      close(deferred.y, direct.y, "y");
      close(deferred.h, direct.h, "h");
      close(deferred.q, direct.q, "q");
      const Out again = chain(m, true, nullptr);
      EXPECT_TRUE(again.y == deferred.y && again.h == deferred.h && again.q == deferred.q) << "not the same bits";
    }
    // Poison: x row 0 of o scaled up so that its sums pass 2^20.
    std::vector<float> big = xa;
    for (int64_t k = 0; k < d; ++k) big[static_cast<size_t>(k)] *= 1e8f;
    h2d(dxa, big.data(), big.size() * 4);
    h2d(dy, y0.data(), y0.size() * 4);
    cuda::GemvResidual r;
    r.add = acc0;
    ASSERT_TRUE(cuda::gemv(&o, 1, dxa.as<float>(), 2, cuda::Epilogue::accumulate, scratch, SharedScratch::kBytes,
                           stream_, {}, nullptr, &r).is_ok());
    ASSERT_TRUE(cuda::gemv_fold(dy.as<float>(), acc0, 2 * d, stream_).is_ok());
    std::vector<float> y(static_cast<size_t>(2 * d));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    d2h(y.data(), dy, y.size() * 4);
    int nan0 = 0, nan1 = 0;
    for (int64_t k = 0; k < d; ++k) nan0 += std::isnan(y[static_cast<size_t>(k)]), nan1 += std::isnan(y[static_cast<size_t>(d + k)]);
    EXPECT_GT(nan0, d / 2) << "row 0's poisoned sums read back as numbers";
    EXPECT_EQ(nan1, 0) << "row 1 was poisoned too";
    h2d(dxa, xa.data(), xa.size() * 4);
    // Argument errors name the rule.
    cuda::GemvResidual bad;
    bad.add = acc0;
    const Status st = cuda::gemv(&q, 1, dy.as<float>(), 1, cuda::Epilogue::store, scratch, SharedScratch::kBytes,
                                 stream_, {}, nullptr, &bad);
    EXPECT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("accumulate epilogue"), std::string::npos) << st.to_string();
    bad = {};
    bad.fold = acc0;
    const Status st2 = cuda::gemv(&o, 1, dxa.as<float>(), 1, cuda::Epilogue::accumulate, scratch,
                                  SharedScratch::kBytes, stream_, {}, nullptr, &bad);
    EXPECT_FALSE(st2.is_ok());
    EXPECT_NE(st2.message().find("fold needs add"), std::string::npos) << st2.to_string();
    EXPECT_FALSE(cuda::gemv_fold(dy.as<float>(), acc0, -1, stream_).is_ok());
  }
}

// The k-split's sums run in thread-block clusters where they fit (cuda_gq.h: gemv_cluster_size),
// so that the outputs compared bit for bit with LITHE_GEMV_CLUSTER=0 (bench/gq_device_run.sh
// gemv_cluster) include cluster launches: on an sm_90 GPU (with the default build's sm_90a code)
// 256 x 1024 int4 g128 splits k 4 ways over 2 items, as clusters of 4, for store, accumulate and
// a fused swiglu; 256 x 256 does not split.
TEST_F(CudaGqGemv, SplitSumsRunInClustersWhereTheyFit) {
  int dev = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  const bool on = major >= 9 && !cuda_test::knob_off("LITHE_GEMV_CLUSTER");
  for (int64_t n_in : {256, 1024}) {
    const DevMatrix gate = upload(gq::random_matrix(fmt(4, 128, false), 256, n_in, 7, false));
    const DevMatrix up = upload(gq::random_matrix(fmt(4, 128, false), 256, n_in, 8, false));
    ASSERT_TRUE(gate.dev != nullptr && up.dev != nullptr);
    const cuda::GemvOut outs[2] = {{&gate.host.desc, gate.dev->p, nullptr}, {&up.host.desc, up.dev->p, nullptr}};
    const int want = n_in == 1024 && on ? 4 : 0;
    for (int64_t m : {1, 3, 16}) {
      EXPECT_EQ(cuda::gemv_cluster_size(outs, 1, m, cuda::Epilogue::store), want) << "n_in " << n_in << " m " << m;
      EXPECT_EQ(cuda::gemv_cluster_size(outs, 1, m, cuda::Epilogue::accumulate), want) << "n_in " << n_in << " m " << m;
      EXPECT_EQ(cuda::gemv_cluster_size(outs, 2, m, cuda::Epilogue::swiglu), want) << "n_in " << n_in << " m " << m;
    }
  }
  EXPECT_EQ(cuda::gemv_cluster_size(nullptr, 1, 1, cuda::Epilogue::store), 0);
}

// Row i of y does not depend on m (the k-split depends on the shape only) and repeated launches
// give the same bits (the partial sums are added in a fixed order, whatever order blocks finish).
// 4096 x 4096 splits k in 8, summed through scratch by the last block of each item (its clusters
// do not fit); 256 x 1024 in 4, summed in thread-block clusters on sm_90; with a folded norm too.
TEST_F(CudaGqGemv, RowsDoNotDependOnM) {
  struct Case {
    int bits;
    int64_t n_out, n_in;
    bool norm;
  };
  for (const Case& cs : {Case{4, 256, 4096, false}, Case{3, 256, 4096, false}, Case{4, 4096, 4096, false},
                         Case{4, 4096, 4096, true}, Case{4, 256, 1024, false}, Case{4, 256, 1024, true}}) {
    const gq::Matrix mat = gq::random_matrix(fmt(cs.bits, 128, false), cs.n_out, cs.n_in, 21, false);
    SCOPED_TRACE(describe(mat) + (cs.norm ? " + norm" : ""));
    const DevMatrix w = upload(mat);
    ASSERT_TRUE(w.dev != nullptr);
    std::mt19937 rng(9);
    const std::vector<float> x = cuda_test::randn(static_cast<size_t>(16 * mat.n_in), rng);
    std::vector<float> nw = cuda_test::randn(static_cast<size_t>(mat.n_in), rng);
    DevMem dx(x.size() * 4), dy(static_cast<size_t>(16 * mat.n_out) * 4), dn(nw.size() * 4);
    h2d(dx, x.data(), x.size() * 4);
    h2d(dn, nw.data(), nw.size() * 4);
    const cuda::GemvOut out{&w.host.desc, w.dev->p, dy.as<float>()};
    const Scratch sc(&out, 1, cuda::Epilogue::store);
    ASSERT_GT(sc.bytes, 0) << "the shape should split k";
    cuda::MatvecNorm mn;
    if (cs.norm) mn = {dn.as<float>(), 1e-5f};
    auto run = [&](int64_t m) {
      std::vector<float> y(static_cast<size_t>(m * mat.n_out));
      EXPECT_TRUE(
          cuda::gemv(&out, 1, dx.as<float>(), m, cuda::Epilogue::store, sc.mem.p, sc.bytes, stream_, mn).is_ok());
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      d2h(y.data(), dy, y.size() * 4);
      return y;
    };
    const std::vector<float> full = run(16);
    cuda_test::expect_bits(run(16), full, "a second launch");
    for (int64_t m : {1, 2, 3, 4, 5, 7, 8, 9, 12}) {
      const std::vector<float> part = run(m);
      cuda_test::expect_bits(part, std::vector<float>(full.begin(), full.begin() + static_cast<ptrdiff_t>(part.size())),
                             "m = " + std::to_string(m));
    }
  }
}

TEST_F(CudaGqGemv, DequantizeF16MatchesReference) {
  struct Case {
    QuantFormat f;
    int64_t n_out, n_in;
    bool act;
  };
  const std::vector<Case> cases = {
      {fmt(4, 128, false), 40, 576, true},   {fmt(4, 128, true), 256, 1024, false}, {fmt(3, 64, true), 33, 96, false},
      {fmt(3, 32, false), 65, 480, true},    {fmt(2, 32, false), 31, 256, false},   {fmt(2, 96, true), 9, 480, true},
      {fmt(8, 512, false), 70, 512, false},  {fmt(8, 32, true), 3, 64, true},
      {fmt(4, 128, false, true), 40, 448, true}, {fmt(4, 64, true, true), 33, 1024, false},  // 2:4 sparse
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    check_dequantize(gq::random_matrix(c.f, c.n_out, c.n_in, seed++, c.act), stream_);
    if (HasFatalFailure()) return;
  }
}

// GemvReady: x's producer flags its column blocks (here a second stream: a host callback that
// sleeps, then the copy of x, then the flags). The launch, issued first, must wait for them and
// give the bits of a plain launch on the same x; without the wait it would read the zeros x held.
// Deferred sums (o's use) and a plain store; int4 g128 and act-order 2:4 int4 (x gathered by perm,
// several column blocks a block). Arguments it cannot take are refused.
TEST_F(CudaGqGemv, ReadyFlagsHoldTheLaunchUntilXLands) {
  constexpr int64_t n = 4096, cols = 128, n_flags = n / cols;
  uint32_t seed = 1900;
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  for (const auto& [f, act] : std::vector<std::pair<QuantFormat, bool>>{{fmt(4, 128, false), false},
                                                                         {fmt(4, 128, true, true), true}}) {
    const gq::Matrix mat = gq::random_matrix(f, n, n, seed++, act);
    SCOPED_TRACE(describe(mat));
    const DevMatrix w = upload(mat);
    ASSERT_TRUE(w.dev != nullptr);
    std::mt19937 rng(seed++);
    const std::vector<float> x = cuda_test::randn(static_cast<size_t>(n), rng);
    const std::vector<unsigned> ones(static_cast<size_t>(n_flags), 1u);
    DevMem dx(x.size() * 8), dy(x.size() * 8), dflags(ones.size() * 4), dacc(static_cast<size_t>(n) * 8);  // (room for m = 2)
    void* const scratch = SharedScratch::get().p;
    const cuda::GemvOut out{&w.host.desc, w.dev->p, dy.as<float>()};
    for (const bool deferred : {false, true}) {
      SCOPED_TRACE(deferred ? "deferred sums" : "store");
      cuda::GemvResidual res;
      if (deferred) res.add = dacc.as<int64_t>();
      const cuda::Epilogue e = deferred ? cuda::Epilogue::accumulate : cuda::Epilogue::store;
      // y (after gemv_fold where deferred) of one launch, ready flags or not.
      auto run = [&](bool flagged) {
        ASSERT_EQ(cudaMemset(dy.p, 0, x.size() * 4), cudaSuccess);
        ASSERT_EQ(cudaMemset(dacc.p, 0, static_cast<size_t>(n) * 8), cudaSuccess);
        ASSERT_EQ(cudaMemset(dx.p, 0, x.size() * 4), cudaSuccess);
        ASSERT_EQ(cudaMemset(dflags.p, 0, ones.size() * 4), cudaSuccess);
        const cuda::GemvReady ready{dflags.as<unsigned>(), cols};
        if (!flagged) h2d(dx, x.data(), x.size() * 4);
        const Status st = cuda::gemv(&out, 1, dx.as<float>(), 1, e, scratch, SharedScratch::kBytes, stream_, {},
                                     nullptr, &res, flagged ? &ready : nullptr);
        ASSERT_TRUE(st.is_ok()) << st.to_string();
        if (flagged) {
          ASSERT_EQ(cudaLaunchHostFunc(
                        producer, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaMemcpyAsync(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice, producer), cudaSuccess);
          ASSERT_EQ(cudaMemcpyAsync(dflags.p, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice, producer),
                    cudaSuccess);
        }
        if (deferred) ASSERT_TRUE(cuda::gemv_fold(dy.as<float>(), dacc.as<int64_t>(), n, stream_).is_ok());
        ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      };
      std::vector<float> plain(x.size()), flagged(x.size());
      run(false);
      d2h(plain.data(), dy, plain.size() * 4);
      run(true);
      d2h(flagged.data(), dy, flagged.size() * 4);
      if (HasFatalFailure()) return;
      EXPECT_EQ(std::memcmp(plain.data(), flagged.data(), plain.size() * 4), 0) << "the flagged launch differs";
      EXPECT_TRUE(std::any_of(plain.begin(), plain.end(), [](float v) { return v != 0.f; }));
    }
    const cuda::GemvReady ready{dflags.as<unsigned>(), cols}, no_cols{dflags.as<unsigned>(), 0};
    const Status two = cuda::gemv(&out, 1, dx.as<float>(), 2, cuda::Epilogue::store, scratch, SharedScratch::kBytes,
                                  stream_, {}, nullptr, nullptr, &ready);
    EXPECT_EQ(two.code(), StatusCode::invalid_argument);
    EXPECT_NE(two.message().find("m = 2"), std::string::npos) << two.message();
    EXPECT_EQ(cuda::gemv(&out, 1, dx.as<float>(), 1, cuda::Epilogue::store, scratch, SharedScratch::kBytes, stream_, {},
                         nullptr, nullptr, &no_cols).code(),
              StatusCode::invalid_argument);
  }
  ASSERT_EQ(cudaStreamDestroy(producer), cudaSuccess);
}

// Under stream capture (decode steps are replayed as CUDA graphs) the replay gives the direct
// launch's bits, with and without act-order, through the k-split's scratch.
TEST_F(CudaGqGemv, RunsUnderGraphCapture) {
  for (bool act : {false, true}) {
    const gq::Matrix mat = gq::random_matrix(fmt(4, 128, false), 64, 14336, 11, act);
    SCOPED_TRACE(describe(mat));
    const DevMatrix w = upload(mat);
    ASSERT_TRUE(w.dev != nullptr);
    const int64_t m = 2;
    std::mt19937 rng(5);
    const std::vector<float> x = cuda_test::randn(static_cast<size_t>(m * mat.n_in), rng);
    DevMem dx(x.size() * 4), y1(static_cast<size_t>(m * mat.n_out) * 4), y2(static_cast<size_t>(m * mat.n_out) * 4);
    h2d(dx, x.data(), x.size() * 4);
    const cuda::GemvOut out{&w.host.desc, w.dev->p, nullptr};
    const Scratch sc(&out, 1, cuda::Epilogue::store);
    ASSERT_TRUE(cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, y1.as<float>(), false, sc.mem.p, sc.bytes,
                                  stream_)
                    .is_ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status st =
        cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, y2.as<float>(), false, sc.mem.p, sc.bytes, stream_);
    ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> a(static_cast<size_t>(m * mat.n_out)), b(a.size());
    d2h(a.data(), y1, a.size() * 4);
    d2h(b.data(), y2, b.size() * 4);
    cuda_test::expect_bits(b, a, "graph replay");
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

TEST_F(CudaGqGemv, UnsupportedShapesAndArgumentErrorsNameTheValue) {
  auto expect_err = [](const Status& st, const std::string& needle) {
    EXPECT_FALSE(st.is_ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
  };
  expect_err(cuda::gemv_supports(fmt(4, 32, false), 64, 100), "n_in");
  expect_err(cuda::gemv_supports(fmt(4, 32, false), 64, 100), "100");
  expect_err(cuda::gemv_supports(fmt(5, 32, false), 64, 128), "bits 5");
  expect_err(cuda::gemv_supports(fmt(4, 48, false), 64, 192), "group 48");
  expect_err(cuda::gemv_supports(fmt(4, 32, false), 0, 128), "n_out");
  EXPECT_TRUE(cuda::gemv_supports(fmt(4, 4096, false, true), 11008, 4096).is_ok());
  {
    const gq::Matrix bad = gq::random_matrix(fmt(4, 100, false), 4, 100, 1, false);
    const auto p = cuda::pack_gemv(bad);
    ASSERT_FALSE(p.is_ok());
    EXPECT_NE(p.status().message().find("100"), std::string::npos) << p.status().to_string();
  }

  const gq::Matrix mat = gq::random_matrix(fmt(4, 128, false), 64, 256, 7, false);
  const DevMatrix w = upload(mat);
  ASSERT_TRUE(w.dev != nullptr);
  DevMem x(9 * 256 * 4 + 16), y(9 * 64 * 4);
  const PackedWeight& d = w.host.desc;
  const cuda::GemvOut out{&d, w.dev->p, nullptr}, out_y{&d, w.dev->p, y.as<float>()};
  const Scratch sc(&out, 1, cuda::Epilogue::store);
  void* scr = sc.mem.p;
  const int64_t sb = sc.bytes;
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 17, y.as<float>(), false, scr, sb, stream_), "m = 17");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 0, y.as<float>(), false, scr, sb, stream_), "m = 0");
  expect_err(cuda::gemv_linear(d, w.dev->p, nullptr, 1, y.as<float>(), false, scr, sb, stream_), "x = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>() + 1, 1, y.as<float>(), false, scr, sb, stream_),
             "not 8-byte aligned");
  expect_err(cuda::gemv(&out_y, 1, x.as<float>(), 1, cuda::Epilogue::store, scr, sb, stream_,
                        cuda::MatvecNorm{x.as<float>() + 1, 1e-5f}),
             "norm.w = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 1, nullptr, false, scr, sb, stream_), "y = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 2, x.as<float>() + 100, false, scr, sb, stream_), "overlaps");
  expect_err(cuda::gemv_linear(d, nullptr, x.as<float>(), 1, y.as<float>(), false, scr, sb, stream_), "w_dev");
  PackedWeight other = d;
  other.layout = cuda::kLayoutMarlin;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, scr, sb, stream_), "layout");
  other = d;
  other.bytes += 256;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, scr, sb, stream_), "bytes");
  other = d;
  other.fmt = fmt(4, 32, false, true);  // a 2:4 layout claimed where only the dense one exists
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, scr, sb, stream_),
             "group multiples of 64");
  other = d;
  other.n_in = 100;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, scr, sb, stream_), "100");
  expect_err(cuda::gemv_dequantize_f16(d, w.dev->p, static_cast<char*>(y.p) + 2, stream_), "out = ");
  {  // a k-split launch without its scratch; fused matrices that do not match
    const gq::Matrix big = gq::random_matrix(fmt(4, 128, false), 64, 4096, 8, false);
    const DevMatrix wb = upload(big);
    ASSERT_TRUE(wb.dev != nullptr);
    const cuda::GemvOut ob{&wb.host.desc, wb.dev->p, y.as<float>()};
    ASSERT_GT(cuda::gemv_scratch_bytes(&ob, 1, cuda::Epilogue::store), 0);
    DevMem xb(4096 * 4);
    expect_err(cuda::gemv(&ob, 1, xb.as<float>(), 1, cuda::Epilogue::store, nullptr, 0, stream_), "scratch");
    const cuda::GemvOut two[2] = {ob, {&d, w.dev->p, y.as<float>() + 64}};
    expect_err(cuda::gemv(two, 2, xb.as<float>(), 1, cuda::Epilogue::store, nullptr, 0, stream_), "differ");
    expect_err(cuda::gemv(two, 1, xb.as<float>(), 1, cuda::Epilogue::swiglu, nullptr, 0, stream_), "swiglu");
    expect_err(cuda::gemv(two, 2, xb.as<float>(), 1, cuda::Epilogue::rope_kv, nullptr, 0, stream_),
               "rope_kv needs exactly 3 matrices");
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}
