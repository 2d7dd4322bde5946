// Runs on a GPU machine: the group-quantized GEMV (cuda_gq.h: pack_gemv, gemv_linear,
// gemv_dequantize_f16) against the scalar oracle gq::reference_linear / gq::dequantize, on fresh
// random matrices (gq::random_matrix, fixed seeds): every format (int2/3/4/8, sym and asym, group
// 32/64/128, a group of 96, per channel), act-order, 2:4-sparse matrices, short last groups,
// odd shapes and the real ones, m = 1..8, store and accumulate. The reference is computed once
// per matrix for the largest m (the smaller m use its first rows).
// Tolerance: 1e-5 |want| + 1e-6 max|W| sum|x_i| (f32 sums in another order; a lost or doubled
// 32-column unit is ~1e-2 of that scale). Rows >= m and y past [m][n_out] must stay untouched.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
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
  EXPECT_EQ(static_cast<int64_t>(d.host.bytes.size()), d.host.desc.bytes);
  d.dev = std::make_unique<DevMem>(d.host.bytes.size());
  h2d(*d.dev, d.host.bytes.data(), d.host.bytes.size());
  return d;
}

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
      const Status st = cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, dy.as<float>(), acc, s);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      std::vector<float> y(y_len);
      d2h(y.data(), dy, y_len * 4);
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

const std::vector<int64_t> kAllM = {1, 2, 3, 4, 5, 8};

}  // namespace

// bits x sym x group (32, 64, 128, per channel) x act-order on one shape (n_out not a multiple of
// the 32-row tile), every m.
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
        check_linear(m, {1, 3, 8}, stream_, seed++);
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

// The real shapes (n_in x n_out), one format each; act-order at n_in 11008 and 14336 with m = 8
// also takes the path that gathers x in several launches (shared memory).
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
  };
  uint32_t seed = 200;
  for (const Shape& sh : shapes) {
    const gq::Matrix m = gq::random_matrix(sh.f, sh.n_out, sh.n_in, seed, sh.act);
    check_linear(m, {1, 3, 8}, stream_, seed++);
    if (HasFatalFailure()) return;
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
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    check_dequantize(gq::random_matrix(c.f, c.n_out, c.n_in, seed++, c.act), stream_);
    if (HasFatalFailure()) return;
  }
}

// Under stream capture (decode steps are replayed as CUDA graphs) the replay gives the direct
// launch's bits, also for act-order with more than 48 KiB of gathered x (a function attribute
// is set at launch).
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
    ASSERT_TRUE(cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, y1.as<float>(), false, stream_).is_ok());
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status st = cuda::gemv_linear(w.host.desc, w.dev->p, dx.as<float>(), m, y2.as<float>(), false, stream_);
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
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 9, y.as<float>(), false, stream_), "m = 9");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 0, y.as<float>(), false, stream_), "m = 0");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>() + 1, 1, y.as<float>(), false, stream_), "x = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, nullptr, 1, y.as<float>(), false, stream_), "x = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 1, nullptr, false, stream_), "y = ");
  expect_err(cuda::gemv_linear(d, w.dev->p, x.as<float>(), 2, x.as<float>() + 100, false, stream_), "overlaps");
  expect_err(cuda::gemv_linear(d, nullptr, x.as<float>(), 1, y.as<float>(), false, stream_), "w_dev");
  PackedWeight other = d;
  other.layout = cuda::kLayoutMarlin;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, stream_), "layout");
  other = d;
  other.bytes += 256;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, stream_), "bytes");
  other = d;
  other.n_in = 100;
  expect_err(cuda::gemv_linear(other, w.dev->p, x.as<float>(), 1, y.as<float>(), false, stream_), "100");
  expect_err(cuda::gemv_dequantize_f16(d, w.dev->p, static_cast<char*>(y.p) + 2, stream_), "out = ");
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}
