// Runs on a GPU machine: cuda::matvec (decode matrix-vector products) against a scalar CPU
// reference accumulated in double, on fresh random inputs with fixed seeds. f16/bf16 weights are
// N(0,1)*0.05 rounded through that type, so the reference multiplies exactly the values the GPU
// reads. Tolerances scale with sum |w||x| of each output, tight enough to catch a lost or doubled
// chunk. Output rows >= m, elements past n_out and the unused y_1 of swiglu must stay untouched.
// Also: argument errors (the message names the value), graph capture, the Llama-2-7B shapes, and
// the folded RMSNorm (MatvecNorm): the reference normalizes x in double (rows of different scale,
// norm weight ~ N(1, 0.3)) and x itself must come back unchanged.
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

#include "lithe/core/buffer.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cuda_ops.h"

using namespace lithe;
using cuda::Epilogue;
using cuda::MatvecOut;
using cuda::WeightType;

namespace {

constexpr float kSentinel = 1.25e30f;  // marks memory the kernel must not write

// cudaMalloc'd bytes, freed on scope exit.
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess) << bytes << " bytes"; }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

void upload(DevBuf& d, const void* h, size_t bytes) { ASSERT_EQ(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
void download(void* h, const DevBuf& d, size_t bytes) {
  ASSERT_EQ(cudaMemcpy(h, d.p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

const char* type_name(WeightType t) { return t == WeightType::f32 ? "f32" : t == WeightType::f16 ? "f16" : "bf16"; }
size_t type_size(WeightType t) { return t == WeightType::f32 ? 4 : 2; }
const char* epi_name(Epilogue e) {
  return e == Epilogue::store ? "store" : e == Epilogue::accumulate ? "accumulate" : "swiglu";
}

// A weight matrix: the exact f32 values and their bytes in type t.
struct HostMatrix {
  std::vector<float> v;
  std::vector<uint8_t> bytes;
};
HostMatrix random_matrix(WeightType t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  HostMatrix h;
  const size_t n = static_cast<size_t>(n_out * n_in);
  h.v.resize(n);
  h.bytes.resize(n * type_size(t));
  for (size_t i = 0; i < n; ++i) {
    const float f = nd(rng) * 0.05f;
    if (t == WeightType::f32) {
      h.v[i] = f;
      std::memcpy(&h.bytes[i * 4], &f, 4);
    } else {
      const uint16_t b = t == WeightType::f16 ? f32_to_f16(f) : f32_to_bf16(f);
      h.v[i] = t == WeightType::f16 ? f16_to_f32(b) : bf16_to_f32(b);
      std::memcpy(&h.bytes[i * 2], &b, 2);
    }
  }
  return h;
}

struct Case {
  WeightType t;
  int64_t m, n_in;
  std::vector<int64_t> n_outs;
  Epilogue e;
  cudaStream_t stream = nullptr;
  bool norm = false;  // fold an RMSNorm of x (eps kNormEps) into the product
};
constexpr float kNormEps = 1e-5f;

std::string describe(const Case& c) {
  std::string s = std::string(type_name(c.t)) + " m=" + std::to_string(c.m) + " n_in=" + std::to_string(c.n_in) +
                  " " + epi_name(c.e) + (c.norm ? " norm" : "") + " n_out={";
  for (size_t j = 0; j < c.n_outs.size(); ++j) {
    if (j) s += ',';
    s += std::to_string(c.n_outs[j]);
  }
  return s + "}";
}

// Runs one matvec on fresh random data and compares every output with the reference. y buffers
// hold m + 1 rows of n_out + 3 floats (row stride n_out as the kernel sees it, then a tail) so
// writes outside [m][n_out] show up as changed sentinels.
void run_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  const int n_mats = static_cast<int>(c.n_outs.size());
  std::vector<HostMatrix> w;
  for (int64_t n : c.n_outs) w.push_back(random_matrix(c.t, n, c.n_in, rng));
  std::vector<float> x(static_cast<size_t>(c.m * c.n_in));
  for (float& v : x) v = nd(rng);
  // With the norm: rows of different scale, the norm weight, and the normalized x (double) that
  // the reference multiplies.
  std::vector<float> g, xr = x;
  if (c.norm) {
    g.resize(static_cast<size_t>(c.n_in));
    for (float& v : g) v = 1.0f + 0.3f * nd(rng);
    for (int64_t i = 0; i < c.m; ++i) {
      double ss = 0;
      for (int64_t k = 0; k < c.n_in; ++k) {
        float& v = x[static_cast<size_t>(i * c.n_in + k)];
        v *= 0.5f + static_cast<float>(i);
        ss += static_cast<double>(v) * v;
      }
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.n_in) + kNormEps);
      for (int64_t k = 0; k < c.n_in; ++k) {
        const size_t idx = static_cast<size_t>(i * c.n_in + k);
        xr[idx] = static_cast<float>(x[idx] * inv * g[static_cast<size_t>(k)]);
      }
    }
  }

  std::vector<std::vector<float>> y0(n_mats);  // initial y (random where accumulated into)
  std::vector<std::unique_ptr<DevBuf>> dw, dy;
  std::vector<MatvecOut> outs(n_mats);
  for (int j = 0; j < n_mats; ++j) {
    const int64_t n = c.n_outs[j];
    const size_t y_len = static_cast<size_t>((c.m + 1) * n + 3);
    y0[j].assign(y_len, kSentinel);
    if (c.e == Epilogue::accumulate)
      for (size_t k = 0; k < static_cast<size_t>(c.m * n); ++k) y0[j][k] = nd(rng);
    dw.push_back(std::make_unique<DevBuf>(w[j].bytes.size()));
    upload(*dw[j], w[j].bytes.data(), w[j].bytes.size());
    dy.push_back(std::make_unique<DevBuf>(y_len * sizeof(float)));
    upload(*dy[j], y0[j].data(), y_len * sizeof(float));
    outs[j] = {dw[j]->p, n, dy[j]->as<float>()};
  }
  DevBuf dx(x.size() * sizeof(float)), dg(std::max<size_t>(g.size(), 1) * sizeof(float));
  upload(dx, x.data(), x.size() * sizeof(float));
  cuda::MatvecNorm norm;
  if (c.norm) {
    upload(dg, g.data(), g.size() * sizeof(float));
    norm = {dg.as<float>(), kNormEps};
  }

  const Status st = cuda::matvec(outs.data(), n_mats, c.t, c.n_in, dx.as<float>(), c.m, c.e, c.stream, norm);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(cudaStreamSynchronize(c.stream), cudaSuccess);
  if (c.norm) {
    std::vector<float> x_after(x.size());
    download(x_after.data(), dx, x.size() * sizeof(float));
    ASSERT_EQ(x_after, x) << "the folded norm changed x";
  }

  // dot[j][i][r] = x[i] · W_j[r] in double (x normalized with the norm), and sum |w x| for the
  // tolerance.
  auto dot = [&](int j, int64_t i, int64_t r, double& abs_sum) {
    const float* wr = &w[j].v[static_cast<size_t>(r * c.n_in)];
    const float* xi = &xr[static_cast<size_t>(i * c.n_in)];
    double s = 0, a = 0;
    for (int64_t k = 0; k < c.n_in; ++k) {
      const double p = static_cast<double>(wr[k]) * xi[k];
      s += p;
      a += std::fabs(p);
    }
    abs_sum = a;
    return s;
  };

  int bad = 0;
  for (int j = 0; j < n_mats; ++j) {
    const int64_t n = c.n_outs[j];
    std::vector<float> y(y0[j].size());
    download(y.data(), *dy[j], y.size() * sizeof(float));
    const bool untouched = c.e == Epilogue::swiglu && j == 1;  // y_1 is unused by swiglu
    for (size_t k = static_cast<size_t>(c.m * n); k < y.size(); ++k)
      ASSERT_EQ(y[k], kSentinel) << "write past y" << j << "[m][n_out] at " << k;
    if (untouched) {
      for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(y[k], kSentinel) << "swiglu wrote y_1 at " << k;
      continue;
    }
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t r = 0; r < n; ++r) {
        double ref, tol, a0;
        const double d = dot(j, i, r, a0);
        if (c.e == Epilogue::swiglu) {
          double a1;
          const double u = dot(1, i, r, a1);
          const double sg = d / (1 + std::exp(-d));
          ref = sg * u;
          tol = 1e-5 * (1.2 * a0 * std::fabs(u) + std::fabs(sg) * a1) + 1e-6 * (1 + std::fabs(ref));
        } else {
          ref = d + (c.e == Epilogue::accumulate ? y0[j][static_cast<size_t>(i * n + r)] : 0.0);
          tol = 1e-5 * a0 + 1e-6 * (1 + std::fabs(ref));
        }
        const float got = y[static_cast<size_t>(i * n + r)];
        if (!(std::fabs(got - ref) <= tol) && ++bad <= 5)
          ADD_FAILURE() << "y" << j << "[" << i << "][" << r << "] = " << got << ", expected " << ref << " (tol " << tol
                        << ")";
      }
  }
  EXPECT_EQ(bad, 0) << "wrong outputs";
}

constexpr WeightType kTypes[] = {WeightType::f32, WeightType::f16, WeightType::bf16};

}  // namespace

// Every weight type, m, odd n_in (1 to 513 chunks per row) and epilogue, with 1..3 matrices of
// different n_out so warps straddle matrix boundaries and the last warp is partly empty.
TEST(CudaMatvec, MatchesReferenceOnOddShapes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Config {
    std::vector<int64_t> n_outs;
    Epilogue e;
  };
  const std::vector<Config> configs = {
      {{1}, Epilogue::store},
      {{17}, Epilogue::store},
      {{3, 17, 577}, Epilogue::store},
      {{577, 1}, Epilogue::accumulate},
      {{1, 3, 17}, Epilogue::accumulate},
      {{17, 17}, Epilogue::swiglu},
      {{577, 577}, Epilogue::swiglu},
  };
  uint32_t seed = 1;
  for (WeightType t : kTypes)
    for (int64_t m : {1, 2, 3, 5, 8})
      for (int64_t n_in : {8, 24, 576, 1536, 2048, 4104})
        for (const Config& cfg : configs) {
          run_case({t, m, n_in, cfg.n_outs, cfg.e}, seed++);
          if (HasFatalFailure()) return;
        }
}

// m = 4, 6, 7 (the rows an M = 4 / 8 kernel skips) on one shape each.
TEST(CudaMatvec, MatchesReferenceForEveryM) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  uint32_t seed = 1000;
  for (WeightType t : kTypes)
    for (int64_t m = 1; m <= cuda::kMatvecMaxRows; ++m) {
      run_case({t, m, 1032, {129, 65}, Epilogue::store}, seed++);
      run_case({t, m, 1032, {33, 33}, Epilogue::swiglu}, seed++);
      if (HasFatalFailure()) return;
    }
}

// The Llama-2-7B decode shapes (several full load batches per row, many blocks).
TEST(CudaMatvec, MatchesReferenceOnLlamaShapes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  run_case({WeightType::f16, 1, 4096, {4096, 4096, 4096}, Epilogue::store}, 77);
  run_case({WeightType::bf16, 2, 4096, {11008, 11008}, Epilogue::swiglu}, 78);
  run_case({WeightType::f16, 1, 11008, {4096}, Epilogue::accumulate}, 79);
  run_case({WeightType::f32, 5, 4096, {4096}, Epilogue::accumulate}, 80);
}

// The folded RMSNorm: every weight type, every m (1..8), odd n_in, each epilogue, 1..3 matrices.
TEST(CudaMatvec, FoldedRmsNormMatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  struct Config {
    std::vector<int64_t> n_outs;
    Epilogue e;
  };
  const std::vector<Config> configs = {
      {{3, 17, 577}, Epilogue::store},
      {{65}, Epilogue::accumulate},
      {{17, 17}, Epilogue::swiglu},
      {{577, 577}, Epilogue::swiglu},
  };
  uint32_t seed = 5000;
  for (WeightType t : kTypes)
    for (int64_t m = 1; m <= cuda::kMatvecMaxRows; ++m)
      for (int64_t n_in : {8, 24, 1032, 4104})
        for (const Config& cfg : configs) {
          Case c{t, m, n_in, cfg.n_outs, cfg.e};
          c.norm = true;
          run_case(c, seed++);
          if (HasFatalFailure()) return;
        }
}

// The folded norm on the Llama-2-7B shapes it serves: attn_norm -> q/k/v, ffn_norm -> gate/up.
TEST(CudaMatvec, FoldedRmsNormOnLlamaShapes) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  Case qkv{WeightType::f16, 1, 4096, {4096, 4096, 4096}, Epilogue::store};
  Case ffn{WeightType::bf16, 1, 4096, {11008, 11008}, Epilogue::swiglu};
  Case ffn8{WeightType::f16, 8, 4096, {11008, 11008}, Epilogue::swiglu};
  for (Case* c : {&qkv, &ffn, &ffn8}) c->norm = true;
  run_case(qkv, 81);
  run_case(ffn, 82);
  run_case(ffn8, 83);
}

TEST(CudaMatvec, RunsOnAStreamAndUnderGraphCapture) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  run_case({WeightType::f16, 3, 576, {1536, 1536}, Epilogue::swiglu, s}, 90);
  run_case({WeightType::bf16, 5, 576, {576, 192, 192}, Epilogue::store, s, true}, 92);

  // Captured once, replayed twice: accumulate adds the product twice.
  std::mt19937 rng(91);
  std::normal_distribution<float> nd;
  const int64_t n_out = 100, n_in = 256, m = 2;
  HostMatrix w = random_matrix(WeightType::bf16, n_out, n_in, rng);
  std::vector<float> x(m * n_in), y(m * n_out, 0.f);
  for (float& v : x) v = nd(rng);
  DevBuf dw(w.bytes.size()), dx(x.size() * 4), dy(y.size() * 4);
  upload(dw, w.bytes.data(), w.bytes.size());
  upload(dx, x.data(), x.size() * 4);
  upload(dy, y.data(), y.size() * 4);
  const MatvecOut out{dw.p, n_out, dy.as<float>()};
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status st = cuda::matvec(&out, 1, WeightType::bf16, n_in, dx.as<float>(), m, Epilogue::accumulate, s);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  cudaGraphExec_t ge;
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  download(y.data(), dy, y.size() * 4);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < n_out; ++r) {
      double d = 0, a = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        d += static_cast<double>(w.v[r * n_in + k]) * x[i * n_in + k];
        a += std::fabs(static_cast<double>(w.v[r * n_in + k]) * x[i * n_in + k]);
      }
      ASSERT_NEAR(y[i * n_out + r], 2 * d, 2e-5 * a + 1e-6) << "i=" << i << " r=" << r;
    }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST(CudaMatvec, ArgumentErrorsNameTheValue) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  DevBuf w(1 << 16), x(1 << 16), y(1 << 16), y2(1 << 16);
  const float* xp = x.as<float>();
  MatvecOut o[2] = {{w.p, 16, y.as<float>()}, {w.p, 16, y2.as<float>()}};
  auto expect_error = [&](const Status& st, const std::string& needle) {
    EXPECT_FALSE(st.is_ok()) << "expected an error naming '" << needle << "'";
    EXPECT_EQ(st.code(), StatusCode::invalid_argument) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp, 9, Epilogue::store, nullptr), "m = 9");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp, 0, Epilogue::store, nullptr), "m = 0");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 7, xp, 1, Epilogue::store, nullptr), "n_in = 7");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 0, xp, 1, Epilogue::store, nullptr), "n_in = 0");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp, 1, Epilogue::swiglu, nullptr), "n_outs = 1");
  expect_error(cuda::matvec(o, 0, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr), "n_outs = 0");
  expect_error(cuda::matvec(o, 4, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr), "n_outs = 4");
  MatvecOut uneven[2] = {{w.p, 16, y.as<float>()}, {w.p, 8, y2.as<float>()}};
  expect_error(cuda::matvec(uneven, 2, WeightType::f16, 64, xp, 1, Epilogue::swiglu, nullptr), "16 and 8");
  MatvecOut misaligned{static_cast<char*>(w.p) + 8, 16, y.as<float>()};
  expect_error(cuda::matvec(&misaligned, 1, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr), "16-byte");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp + 1, 1, Epilogue::store, nullptr), "16-byte");
  MatvecOut empty{w.p, 0, y.as<float>()};
  expect_error(cuda::matvec(&empty, 1, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr), "n_out = 0");
  MatvecOut onto_x{w.p, 16, x.as<float>() + 8};
  expect_error(cuda::matvec(&onto_x, 1, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr), "overlaps x");
  const float* gp = y2.as<float>();
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr, {gp + 1, 1e-5f}), "norm.w");
  expect_error(cuda::matvec(o, 1, WeightType::f16, 64, xp, 1, Epilogue::store, nullptr, {gp, -1.0f}), "norm.eps");
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing was launched
}
