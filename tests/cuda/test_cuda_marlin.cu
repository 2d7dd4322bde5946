// The Marlin-class int4 GEMM (cuda_gq.h: pack_marlin, marlin_linear) against the gq reference.
//
// Host tests (run without a GPU):
// - MarlinPack.*: the packed layout read back the way the kernel reads it: the nibbles of each
//   lane's words dequantized with the kernel's f16 bit tricks (emulated on the host: lop3 masks,
//   the 0x6400 exponent, sub / fma by 1/16, f16 product) and placed by the PTX m16n8k16 B-fragment
//   layout, scales and zeros fetched at the kernel's permuted positions; every value must equal
//   f16(s * (q - z)) of the canonical matrix. 2:4 sparse: the dense matrix is rebuilt from the kept
//   values and the metadata as marlin_layout.cuh states mma.sp reads them (the GPU probe below
//   checks that statement on the hardware). Also the supported-shape errors.
// GPU tests (MarlinGpu.*, skipped without a device):
// - An oracle: a naive GPU kernel over the dequantized f32 matrix accumulating in double, itself
//   checked against gq::reference_linear on a small shape. x is rounded to f16 first (the kernel
//   computes in f16 activations), so the only kernel-side rounding left is f16(s * (q - z)) and
//   the f32 accumulation: ||y - ref|| / ||ref|| <= 1e-3 and max |y - ref| <= 1e-2 * rms(ref).
// - Shapes (n_in x n_out) 4096x4096, 4096x11008, 11008x4096, 4096x14336, 14336x4096 (one format
//   each, rotating g128 / per channel, sym / asym, act-order) and 576x1536, 1536x576, 576x192 (all
//   8 format combinations, plus m = 1000 and 2048, where slices are finished without a split), at
//   m in {1, 2, 3, 4, 8, 12, 16, 17, 20, 24, 32, 48, 64, 118, 128} (17 and 20: the wgmma kernel's
//   smallest m); each m runs store then accumulate onto random y, checks that the row after the
//   last is untouched, that a second store is bit-identical (the split-k reduction is ordered), and
//   that the reduction counters in scratch are zero again.
//   With LITHE_TEST_MARLIN_HASH set, each store's y is printed as a hash ("[ marlin hash ]"), so
//   that two settings can be compared bit for bit (bench/gq_device_run.sh: cluster sums on / off).
// - 2:4 sparse (stage 2): a probe of the mma.sp metadata convention (one warp, known inputs; on
//   failure it prints which kept indices the hardware read), then the small shapes in 4 formats
//   (m up to 1000) and 4096x4096 g128 asym act-order, as above.
// - Errors: wrong layout, scratch too small.
#include <gtest/gtest.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "lithe/core/half.h"
#include "lithe/kernels/cuda_gq.h"
#include "lithe/kernels/group_quant.h"

using namespace lithe;

namespace {

constexpr float kSentinel = 1.25e30f;

QuantFormat fmt4(int64_t group, bool sym) {
  QuantFormat f;
  f.bits = 4;
  f.group = group;
  f.sym = sym;
  return f;
}

std::string describe(const gq::Matrix& w) {
  return "[n_out " + std::to_string(w.n_out) + ", n_in " + std::to_string(w.n_in) + "] " +
         format_name(w.fmt, w.n_in) + (w.perm.empty() ? "" : " act-order");
}

// ---- host emulation of the kernel's dequantization ---------------------------------------------
uint32_t u32_at(const std::vector<uint8_t>& b, int64_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}
uint16_t u16_at(const std::vector<uint8_t>& b, int64_t off) {
  uint16_t v;
  std::memcpy(&v, b.data() + off, 2);
  return v;
}
// The kernel's f16x2 ops on one half: exact integer arithmetic in f32 (all values involved are
// small integers or products of two f16, exact in f32), rounded to f16 where the hardware rounds.
float f16r(float v) { return f16_to_f32(f32_to_f16(v)); }

void check_layout(const gq::Matrix& w) {
  auto packed = cuda::pack_marlin(w);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  const PackedWeight& d = packed->desc;
  const std::vector<uint8_t>& bytes = packed->bytes;
  ASSERT_EQ(d.layout, cuda::kLayoutMarlin);
  ASSERT_EQ(static_cast<int64_t>(bytes.size()), d.bytes);
  ASSERT_EQ(d.has_perm, !w.perm.empty());
  const int64_t N = w.n_out, K = w.n_in, G = w.n_groups();
  const int64_t k_pad = (K + 127) / 128 * 128;
  const bool sparse = w.fmt.sparse24;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(d.section[i] % 256, 0) << "section " << i;
  ASSERT_GE(d.section[1] - d.section[0], k_pad * N / (sparse ? 4 : 2));
  ASSERT_GE(d.section[2] - d.section[1], G * N * 2);
  ASSERT_GE(d.section[3] - d.section[2], w.fmt.sym ? 0 : G * N);
  ASSERT_GE(d.section[4] - d.section[3], w.perm.empty() ? 0 : K * 4);
  ASSERT_GE(d.section[5] - d.section[4], sparse ? k_pad * N / 8 : 0);
  ASSERT_EQ(d.section[5], d.bytes);
  if (!w.perm.empty())
    ASSERT_EQ(std::memcmp(bytes.data() + d.section[3], w.perm.data(), static_cast<size_t>(K) * 4), 0);

  // What the thread with mma group g reads for column block e = 2j + h of its warp's 64-column run
  // nb in group gi: entry 8g + e of the run (scale_column of marlin_layout.cuh, stated here again).
  auto scale_of = [&](int64_t gi, int64_t nb, int g, int e) {
    return f16_to_f32(u16_at(bytes, d.section[1] + (gi * N + 64 * nb + 8 * g + e) * 2));
  };
  auto zero_of = [&](int64_t gi, int64_t nb, int g, int e) -> float {
    return w.fmt.sym ? 8.f : static_cast<float>(bytes[static_cast<size_t>(d.section[2] + gi * N + 64 * nb + 8 * g + e)]);
  };
  int64_t bad = 0;
  const int64_t nb64 = N / 64;
  auto want_at = [&](int64_t n, int64_t k) {
    const auto gw = static_cast<size_t>(n * G + k / w.fmt.group);
    return f16r(f16_to_f32(w.scales[gw]) * static_cast<float>(w.codes[static_cast<size_t>(n * K + k)] - w.zeros[gw]));
  };
  if (sparse) {
    // Rebuild the dense matrix from the kept values and the metadata, read as the kernel and
    // mma.sp (as marlin_layout.cuh states it) would, then compare every entry.
    std::vector<float> rebuilt(static_cast<size_t>(N * k_pad), 0.f);
    std::vector<uint8_t> hits(rebuilt.size(), 0);
    for (int64_t kt = 0; kt < k_pad / 32; ++kt)
      for (int64_t nb = 0; nb < nb64; ++nb)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          for (int f = 0; f < 4; ++f) {
            const int64_t gi = std::min((32 * kt) / w.fmt.group, G - 1);
            uint32_t q = u32_at(bytes, d.section[0] + (((kt * nb64 + nb) * 32 + lane) * 4 + f) * 4);
            const uint32_t lo0 = (q & 0x000f000fu) | 0x64006400u, hi0 = (q & 0x00f000f0u) | 0x64006400u;
            q >>= 8;
            const uint32_t lo1 = (q & 0x000f000fu) | 0x64006400u, hi1 = (q & 0x00f000f0u) | 0x64006400u;
            const uint32_t regs[4] = {lo0, hi0, lo1, hi1};  // a0a1, a4a5, a2a3, a6a7
            for (int r = 0; r < 4; ++r) {
              const int e = 2 * f + r / 2;  // scale entry: row g (r 0, 1) or g + 8 (r 2, 3)
              const float s = scale_of(gi, nb, g, e), z = zero_of(gi, nb, g, e);
              const int64_t n = 64 * nb + 16 * f + 8 * (r / 2) + g;
              const int chunk = t + 4 * (r % 2);  // 0..7 within the k32 tile
              // Its metadata: lane 4g + 2 (f & 1) + chunk / 4, word f / 2, half r / 2, nibble chunk % 4.
              const int mlane = 4 * g + 2 * (f & 1) + chunk / 4;
              const uint32_t mw = u32_at(bytes, d.section[4] + (((kt * nb64 + nb) * 32 + mlane) * 2 + f / 2) * 4);
              const uint32_t nib = (mw >> (16 * (r / 2) + 4 * (chunk % 4))) & 0xfu;
              const int idx[2] = {static_cast<int>(nib & 3u), static_cast<int>(nib >> 2)};
              if (idx[0] >= idx[1] && ++bad <= 5)
                ADD_FAILURE() << describe(w) << ": metadata indices " << idx[0] << ", " << idx[1] << " not increasing";
              for (int half = 0; half < 2; ++half) {
                const float hv = f16_to_f32(static_cast<uint16_t>(half == 0 ? regs[r] & 0xffffu : regs[r] >> 16));
                const float qz = (r % 2 == 0) ? hv - (1024.f + z) : hv * (1.f / 16.f) - (64.f + z);
                const int64_t k = 32 * kt + 4 * chunk + idx[half];
                const auto at = static_cast<size_t>(n * k_pad + k);
                rebuilt[at] = f16r(qz * s);
                ++hits[at];
              }
            }
          }
        }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const auto at = static_cast<size_t>(n * k_pad + k);
        const float want = want_at(n, k);
        if ((hits[at] > 1 || rebuilt[at] != want) && ++bad <= 5)
          ADD_FAILURE() << describe(w) << ": n " << n << " k " << k << " got " << rebuilt[at] << " want " << want
                        << " (kept " << int{hits[at]} << " times)";
      }
    EXPECT_EQ(bad, 0) << describe(w);
    return;
  }
  for (int64_t kt = 0; kt < k_pad / 16; ++kt)
    for (int64_t nb = 0; nb < nb64; ++nb)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int j = 0; j < 4; ++j) {
          const int64_t kt0 = 16 * kt;
          const int64_t gi = std::min(kt0 / w.fmt.group, G - 1);
          uint32_t q = u32_at(bytes, d.section[0] + (((kt * nb64 + nb) * 32 + lane) * 4 + j) * 4);
          // lop3 (q & mask) | 0x64006400, then q >>= 8 for the second pair.
          const uint32_t lo0 = (q & 0x000f000fu) | 0x64006400u, hi0 = (q & 0x00f000f0u) | 0x64006400u;
          q >>= 8;
          const uint32_t lo1 = (q & 0x000f000fu) | 0x64006400u, hi1 = (q & 0x00f000f0u) | 0x64006400u;
          // reg: {value of the low half, value of the high half}; (1024 + q) - (1024 + z) and
          // (1024 + 16q) * (1/16) - (64 + z), each exact, then * s rounded to f16.
          const uint32_t regs[4] = {lo0, hi0, lo1, hi1};
          for (int r = 0; r < 4; ++r) {
            const int e = 2 * j + r / 2;  // column block: r 0,1 -> 16j..; r 2,3 -> 16j+8..
            const float s = scale_of(gi, nb, g, e), z = zero_of(gi, nb, g, e);
            for (int half = 0; half < 2; ++half) {
              const float hv = f16_to_f32(static_cast<uint16_t>(half == 0 ? regs[r] & 0xffffu : regs[r] >> 16));
              const float qz = (r % 2 == 0) ? hv - (1024.f + z) : hv * (1.f / 16.f) - (64.f + z);
              const float got = f16r(qz * s);
              // PTX m16n8k16 B fragment: b0,b1 (reg 0): k = 2t, 2t+1; b2,b3 (reg 1): k = 2t+8, 2t+9; n = g.
              const int64_t k = kt0 + 2 * t + 8 * (r % 2) + half;
              const int64_t n = 64 * nb + 16 * j + 8 * (r / 2) + g;
              if (k >= K) continue;
              const float want = want_at(n, k);
              if (got != want && ++bad <= 5)
                ADD_FAILURE() << describe(w) << ": k " << k << " n " << n << " (kt " << kt << " nb " << nb << " lane "
                              << lane << " word " << j << " reg " << r << ") got " << got << " want " << want;
            }
          }
        }
      }
  EXPECT_EQ(bad, 0) << describe(w);
}

TEST(MarlinPack, LayoutReadsBackAsTheKernelDequantizes) {
  check_layout(gq::random_matrix(fmt4(128, true), 192, 576, 1, false));
  check_layout(gq::random_matrix(fmt4(128, false), 192, 576, 2, true));
  check_layout(gq::random_matrix(fmt4(576, false), 128, 576, 3, false));   // per channel
  check_layout(gq::random_matrix(fmt4(256, false), 256, 1536, 4, true));   // group 256
  check_layout(gq::random_matrix(fmt4(1536, true), 64, 1536, 5, true));    // per channel sym
}

QuantFormat sparse4(int64_t group, bool sym) {
  QuantFormat f = fmt4(group, sym);
  f.sparse24 = true;
  return f;
}

TEST(MarlinPack, SparseLayoutReadsBackAsTheKernelDequantizes) {
  check_layout(gq::random_matrix(sparse4(128, true), 192, 576, 21, false));
  check_layout(gq::random_matrix(sparse4(128, false), 192, 576, 22, true));
  check_layout(gq::random_matrix(sparse4(576, false), 128, 576, 23, false));
  check_layout(gq::random_matrix(sparse4(256, true), 256, 1536, 24, true));
  // Chunks with fewer than 2 non-zero weights (here: all zero in half the rows).
  gq::Matrix w = gq::random_matrix(sparse4(128, false), 64, 256, 25, false);
  for (int64_t r = 0; r < w.n_out; r += 2)
    for (int64_t k = 0; k < w.n_in; ++k)
      w.codes[static_cast<size_t>(r * w.n_in + k)] = w.zeros[static_cast<size_t>(r * w.n_groups() + k / 128)];
  check_layout(w);
}

TEST(MarlinPack, UnsupportedShapesNameTheShape) {
  struct Bad {
    QuantFormat f;
    int64_t n_out, n_in;
    std::string needle;
  };
  QuantFormat f3 = fmt4(128, true);
  f3.bits = 3;
  QuantFormat sp = fmt4(128, true);
  sp.sparse24 = true;
  const std::vector<Bad> bad = {
      {fmt4(128, true), 100, 4096, "n_out 100"},  {fmt4(128, true), 4096, 4000, "n_in 4000"},
      {fmt4(64, true), 4096, 4096, "group 64"},   {f3, 4096, 4096, "not 4-bit"},
      {fmt4(128, true), 0, 4096, "n_out 0"},      {fmt4(96, false), 192, 576, "group 96"},
  };
  for (const Bad& b : bad) {
    const Status s = cuda::marlin_supports(b.f, b.n_out, b.n_in);
    EXPECT_FALSE(s.is_ok()) << b.needle;
    EXPECT_EQ(s.code(), StatusCode::unsupported) << s.to_string();
    EXPECT_NE(s.message().find(b.needle), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(cuda::marlin_supports(sp, 4096, 4096).is_ok());
  EXPECT_TRUE(cuda::marlin_supports(fmt4(128, true), 192, 576).is_ok());
  EXPECT_TRUE(cuda::marlin_supports(fmt4(576, false), 192, 576).is_ok());
  EXPECT_TRUE(cuda::marlin_supports(fmt4(128, false), 11008, 4096).is_ok());
  // pack_marlin refuses them too.
  auto r = cuda::pack_marlin(gq::random_matrix(fmt4(64, true), 128, 256, 1, false));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("group 64"), std::string::npos) << r.status().to_string();
}

// ---- GPU ----------------------------------------------------------------------------------------
// y[i][r] = sum_c x[i][c] * w[r][c] in double; block (8-row chunk of x, r): the chunks of one
// weight row are neighbours in launch order, so the row comes from HBM once.
__global__ void oracle_kernel(const float* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int m,
                              int n_out, int n_in) {
  constexpr int R = 8;
  const int r = blockIdx.y, i0 = blockIdx.x * R;
  double acc[R] = {};
  const float* wr = w + static_cast<int64_t>(r) * n_in;
  for (int c = threadIdx.x; c < n_in; c += blockDim.x) {
    const double wv = wr[c];
#pragma unroll
    for (int ii = 0; ii < R; ++ii)
      if (i0 + ii < m) acc[ii] += wv * x[static_cast<int64_t>(i0 + ii) * n_in + c];
  }
  __shared__ double red[R][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int ii = 0; ii < R; ++ii) {
    double v = acc[ii];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[ii][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < R && i0 + static_cast<int>(threadIdx.x) < m) {
    double v = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x) / 32; ++k) v += red[threadIdx.x][k];
    y[static_cast<int64_t>(i0 + threadIdx.x) * n_out + r] = static_cast<float>(v);
  }
}

// One warp, one mma.sp::ordered_metadata m16n8k32 per sparsity selector, to check the fragment and
// metadata conventions the 2:4 layout assumes (marlin_layout.cuh): A's kept values are 1 (lower
// index) and 16 (higher) in every chunk; B[k][n] = 2^(k % 4) when k / 4 == n, else 0; so
// D[r][n] = 2^i0 + 16 * 2^i1 with (i0, i1) the kept indices of chunk n of row r as the hardware
// read them from the metadata. meta: [2 selectors][32 lanes]; out: [2][16][8].
__global__ void sparse_probe_kernel(const uint32_t* meta, float* out) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  uint32_t b[4];
  for (int i = 0; i < 4; ++i) {
    uint32_t v = 0;
    for (int h = 0; h < 2; ++h) {
      const int k = 2 * t + h + 8 * i;
      const float bv = (k >> 2) == g ? static_cast<float>(1 << (k & 3)) : 0.f;
      v |= static_cast<uint32_t>(__half_as_ushort(__float2half(bv))) << (16 * h);
    }
    b[i] = v;
  }
  const uint32_t a = 0x4c003c00u;  // {1, 16}
  for (int sel = 0; sel < 2; ++sel) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    const uint32_t e = meta[sel * 32 + lane];
    if (sel == 0)
      asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                   "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0;\n"
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                   : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
    else
      asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                   "{%4, %5, %6, %7}, {%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 1;\n"
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                   : "r"(a), "r"(a), "r"(a), "r"(a), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
    float* o = out + sel * 128;
    o[g * 8 + 2 * t] = c[0];
    o[g * 8 + 2 * t + 1] = c[1];
    o[(g + 8) * 8 + 2 * t] = c[2];
    o[(g + 8) * 8 + 2 * t + 1] = c[3];
  }
}

struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 16)), cudaSuccess) << bytes; }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

// Rows of x [rows][n_in] rounded to f16 (values ~N(0, 1)).
std::vector<float> f16_rows(int64_t rows, int64_t n_in, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<float> x = cuda_test::randn(static_cast<size_t>(rows * n_in), rng);
  for (float& v : x) v = f16r(v);
  return x;
}

struct Err {
  double rel_l2, max_abs_over_rms;
};
Err compare(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0, max_abs = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
    max_abs = std::isfinite(got[i]) ? std::max(max_abs, std::fabs(d)) : INFINITY;
  }
  const double rms = std::sqrt(den / static_cast<double>(std::max<size_t>(want.size(), 1)));
  return {den > 0 ? std::sqrt(num / den) : std::sqrt(num), rms > 0 ? max_abs / rms : max_abs};
}

class MarlinGpu : public cuda_test::CudaStreamTest {
 protected:
  // The whole sweep of one matrix over the batch sizes.
  void run_matrix(const gq::Matrix& w, const std::vector<int64_t>& batches) {
    const std::string what = describe(w);
    auto packed = cuda::pack_marlin(w);
    ASSERT_TRUE(packed.is_ok()) << what << ": " << packed.status().to_string();
    const int64_t N = w.n_out, K = w.n_in;
    const int64_t max_m = *std::max_element(batches.begin(), batches.end());

    DevBuf wdev(packed->bytes.size());
    ASSERT_EQ(cudaMemcpy(wdev.p, packed->bytes.data(), packed->bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
    const std::vector<float> wf = gq::dequantize(w);
    DevBuf wref(wf.size() * 4);
    ASSERT_EQ(cudaMemcpy(wref.p, wf.data(), wf.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const std::vector<float> x = f16_rows(max_m, K, 1000 + static_cast<uint64_t>(N));
    DevBuf xdev(x.size() * 4);
    ASSERT_EQ(cudaMemcpy(xdev.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    const int64_t scratch_bytes = cuda::marlin_scratch_bytes(packed->desc, max_m);
    DevBuf scratch(static_cast<size_t>(scratch_bytes));
    ASSERT_EQ(cudaMemset(scratch.p, 0, static_cast<size_t>(scratch_bytes)), cudaSuccess);
    DevBuf ydev(static_cast<size_t>((max_m + 1) * N) * 4);
    // The oracle for all max_m rows; m rows use its first m rows (x's first m rows).
    std::vector<float> ref_all(static_cast<size_t>(max_m * N));
    {
      DevBuf yref(ref_all.size() * 4);
      oracle_kernel<<<dim3(static_cast<unsigned>((max_m + 7) / 8), static_cast<unsigned>(N)), 128, 0, stream_>>>(
          wref.as<float>(), xdev.as<float>(), yref.as<float>(), static_cast<int>(max_m), static_cast<int>(N),
          static_cast<int>(K));
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(ref_all.data(), yref.p, ref_all.size() * 4, cudaMemcpyDeviceToHost, stream_),
                cudaSuccess);
      sync();
    }

    std::mt19937 rng(7);
    for (int64_t m : batches) {
      SCOPED_TRACE(what + " m=" + std::to_string(m));
      const std::vector<float> ref(ref_all.begin(), ref_all.begin() + m * N);

      // Store, with a sentinel row after the last.
      std::vector<float> y0(static_cast<size_t>((m + 1) * N), kSentinel);
      ASSERT_EQ(cudaMemcpyAsync(ydev.p, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice, stream_), cudaSuccess);
      const Status st = cuda::marlin_linear(packed->desc, wdev.p, xdev.as<float>(), m, ydev.as<float>(), false,
                                            scratch.p, scratch_bytes, stream_);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      std::vector<float> got(y0.size());
      ASSERT_EQ(cudaMemcpyAsync(got.data(), ydev.p, got.size() * 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
      sync();
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      for (int64_t c = 0; c < N; ++c)
        ASSERT_EQ(got[static_cast<size_t>(m * N + c)], kSentinel) << "row m written at column " << c;
      got.resize(static_cast<size_t>(m * N));
      cuda_test::print_hash_if("LITHE_TEST_MARLIN_HASH", "marlin hash", what, m, got);  // two settings, bit for bit
      const Err e = compare(got, ref);
      EXPECT_LE(e.rel_l2, 1e-3) << "store: relative L2 error";
      EXPECT_LE(e.max_abs_over_rms, 1e-2) << "store: max |error| / rms(ref)";

      // A second store is bit-identical.
      const Status st2 = cuda::marlin_linear(packed->desc, wdev.p, xdev.as<float>(), m, ydev.as<float>(), false,
                                             scratch.p, scratch_bytes, stream_);
      ASSERT_TRUE(st2.is_ok()) << st2.to_string();
      std::vector<float> again(got.size());
      ASSERT_EQ(cudaMemcpyAsync(again.data(), ydev.p, again.size() * 4, cudaMemcpyDeviceToHost, stream_),
                cudaSuccess);
      sync();
      ASSERT_EQ(std::memcmp(again.data(), got.data(), got.size() * 4), 0) << "second run differs";

      // Accumulate onto random y.
      std::vector<float> yacc = cuda_test::randn(static_cast<size_t>(m * N), rng);
      ASSERT_EQ(cudaMemcpyAsync(ydev.p, yacc.data(), yacc.size() * 4, cudaMemcpyHostToDevice, stream_), cudaSuccess);
      const Status st3 = cuda::marlin_linear(packed->desc, wdev.p, xdev.as<float>(), m, ydev.as<float>(), true,
                                             scratch.p, scratch_bytes, stream_);
      ASSERT_TRUE(st3.is_ok()) << st3.to_string();
      std::vector<float> gacc(yacc.size());
      ASSERT_EQ(cudaMemcpyAsync(gacc.data(), ydev.p, gacc.size() * 4, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
      std::vector<int32_t> counters(1024);
      ASSERT_EQ(cudaMemcpyAsync(counters.data(), scratch.p, counters.size() * 4, cudaMemcpyDeviceToHost, stream_),
                cudaSuccess);
      sync();
      for (size_t i = 0; i < ref.size(); ++i) gacc[i] -= yacc[i];  // compare the added part
      const Err ea = compare(gacc, ref);
      EXPECT_LE(ea.rel_l2, 2e-3) << "accumulate: relative L2 error";
      EXPECT_LE(ea.max_abs_over_rms, 2e-2) << "accumulate: max |error| / rms(ref)";
      for (size_t i = 0; i < counters.size(); ++i) ASSERT_EQ(counters[i], 0) << "reduction counter " << i;
      if (HasFailure()) return;  // one failing batch size says enough
    }
  }
};

const std::vector<int64_t> kBatches = {1, 2, 3, 4, 8, 12, 16, 17, 20, 24, 32, 48, 64, 118, 128};

TEST_F(MarlinGpu, OracleMatchesReference) {
  const gq::Matrix w = gq::random_matrix(fmt4(128, false), 192, 576, 11, true);
  const int64_t m = 5;
  const std::vector<float> x = f16_rows(m, w.n_in, 3);
  std::vector<float> want(static_cast<size_t>(m * w.n_out));
  gq::reference_linear(w, x.data(), m, want.data());
  const std::vector<float> wf = gq::dequantize(w);
  cuda_test::Dev<float> wd(wf), xd(x), yd(std::vector<float>(want.size(), 0.f));
  oracle_kernel<<<dim3(1, static_cast<unsigned>(w.n_out)), 128, 0, stream_>>>(
      wd.get(), xd.get(), yd.get(), static_cast<int>(m), static_cast<int>(w.n_out), static_cast<int>(w.n_in));
  sync();
  cuda_test::expect_close(yd.host(), want, 1e-6f, 1e-6f, "oracle");
}

TEST_F(MarlinGpu, SparseMetadataConvention) {
  // A different valid (increasing) index pair for each (row, chunk).
  const int pairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  auto pat = [&](int sel, int r, int c) { return pairs[(r * 5 + c * 7 + sel * 3) % 6]; };
  // Lanes t = 2 sel, 2 sel + 1 of each group hold the metadata: k half h = t & 1; bits 0..15 row g,
  // 16..31 row g + 8; chunk c of the half at bits 4c: lower index, then higher.
  std::vector<uint32_t> meta(64, 0);
  for (int sel = 0; sel < 2; ++sel)
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      if (t / 2 != sel) continue;
      const int h = t & 1;
      uint32_t w = 0;
      for (int half = 0; half < 2; ++half)
        for (int c = 0; c < 4; ++c) {
          const int* pr = pat(sel, g + 8 * half, 4 * h + c);
          w |= static_cast<uint32_t>(pr[0] | pr[1] << 2) << (16 * half + 4 * c);
        }
      meta[static_cast<size_t>(sel * 32 + lane)] = w;
    }
  cuda_test::Dev<uint32_t> md(meta);
  cuda_test::Dev<float> od(std::vector<float>(256, -1.f));
  sparse_probe_kernel<<<1, 32, 0, stream_>>>(md.get(), od.get());
  sync();
  const std::vector<float> out = od.host();
  std::string table;
  int bad = 0;
  for (int sel = 0; sel < 2; ++sel)
    for (int r = 0; r < 16; ++r) {
      table += "sel " + std::to_string(sel) + " row " + std::to_string(r) + ":";
      for (int c = 0; c < 8; ++c) {
        const int* pr = pat(sel, r, c);
        const float want = static_cast<float>((1 << pr[0]) + 16 * (1 << pr[1]));
        const float got = out[static_cast<size_t>(sel * 128 + r * 8 + c)];
        bad += got != want;
        table += " " + std::to_string(static_cast<int>(got)) + (got != want ? "(want " + std::to_string(static_cast<int>(want)) + ")" : "");
      }
      table += "\n";
    }
  EXPECT_EQ(bad, 0) << "mma.sp metadata / fragment convention differs from marlin_layout.cuh; D[r][c] = 2^i0 + "
                       "16 * 2^i1 of the kept indices the hardware used:\n"
                    << table;
}

TEST_F(MarlinGpu, SparseShapes) {
  std::vector<int64_t> batches = kBatches;
  batches.push_back(1000);
  uint64_t seed = 300;
  const int64_t shapes[][2] = {{576, 1536}, {1536, 576}, {576, 192}};  // n_in x n_out
  for (const auto& sh : shapes)
    for (const bool per_channel : {false, true})
      for (const bool sym : {true, false}) {
        const bool act = sym != per_channel;
        QuantFormat f = fmt4(per_channel ? sh[0] : 128, sym);
        f.sparse24 = true;
        run_matrix(gq::random_matrix(f, sh[1], sh[0], ++seed, act), batches);
        if (HasFailure()) return;
      }
  QuantFormat f = fmt4(128, false);
  f.sparse24 = true;
  run_matrix(gq::random_matrix(f, 4096, 4096, ++seed, true), kBatches);
}

TEST_F(MarlinGpu, SmallShapesAllFormats) {
  std::vector<int64_t> batches = kBatches;
  batches.push_back(1000);
  batches.push_back(2048);
  const int64_t shapes[][2] = {{576, 1536}, {1536, 576}, {576, 192}};  // n_in x n_out
  uint64_t seed = 100;
  for (const auto& sh : shapes)
    for (const bool per_channel : {false, true})
      for (const bool sym : {true, false})
        for (const bool act : {false, true}) {
          const gq::Matrix w = gq::random_matrix(fmt4(per_channel ? sh[0] : 128, sym), sh[1], sh[0], ++seed, act);
          run_matrix(w, batches);
          if (HasFailure()) return;
        }
  // A group that is a multiple of 128 but not 128.
  run_matrix(gq::random_matrix(fmt4(256, false), 576, 1536, ++seed, true), kBatches);
}

TEST_F(MarlinGpu, LlamaShapes) {
  struct Case {
    int64_t n_in, n_out, group;  // group 0: per channel
    bool sym, act;
  };
  const Case cases[] = {
      {4096, 4096, 128, true, false}, {4096, 11008, 128, false, true}, {11008, 4096, 0, true, true},
      {4096, 14336, 0, false, false}, {14336, 4096, 128, true, true},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const gq::Matrix w =
        gq::random_matrix(fmt4(c.group == 0 ? c.n_in : c.group, c.sym), c.n_out, c.n_in, ++seed, c.act);
    run_matrix(w, kBatches);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ marlin ] %s: %.1f s\n", describe(w).c_str(), s);
    if (HasFailure()) return;
  }
}

TEST_F(MarlinGpu, ArgumentErrors) {
  const gq::Matrix w = gq::random_matrix(fmt4(128, true), 192, 576, 9, false);
  auto packed = cuda::pack_marlin(w);
  ASSERT_TRUE(packed.is_ok());
  DevBuf wdev(packed->bytes.size()), x(4 * 576 * 4), y(4 * 192 * 4);
  const int64_t need = cuda::marlin_scratch_bytes(packed->desc, 4);
  DevBuf scratch(static_cast<size_t>(need));
  ASSERT_EQ(cudaMemset(scratch.p, 0, static_cast<size_t>(need)), cudaSuccess);
  PackedWeight other = packed->desc;
  other.layout = cuda::kLayoutGemv;
  const Status s1 =
      cuda::marlin_linear(other, wdev.p, x.as<float>(), 4, y.as<float>(), false, scratch.p, need, stream_);
  EXPECT_EQ(s1.code(), StatusCode::invalid_argument) << s1.to_string();
  const Status s2 =
      cuda::marlin_linear(packed->desc, wdev.p, x.as<float>(), 4, y.as<float>(), false, scratch.p, need - 1, stream_);
  EXPECT_EQ(s2.code(), StatusCode::invalid_argument) << s2.to_string();
  EXPECT_NE(s2.message().find("scratch"), std::string::npos) << s2.to_string();
  const Status s3 =
      cuda::marlin_linear(packed->desc, wdev.p, x.as<float>(), 0, y.as<float>(), false, scratch.p, need, stream_);
  EXPECT_EQ(s3.code(), StatusCode::invalid_argument) << s3.to_string();
  const Status s4 =
      cuda::marlin_linear(packed->desc, wdev.p, x.as<float>(), 4, y.as<float>(), false, scratch.p, need, stream_);
  EXPECT_TRUE(s4.is_ok()) << s4.to_string();
  sync();
}

}  // namespace
