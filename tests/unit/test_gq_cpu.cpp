// Tests of the CPU gq kernels (cpu::pack_gq + cpu::linear on DType::gq) against the scalar oracle
// gq::reference_linear (double accumulation over the dequantized matrix):
//  1. every format (int2/3/4/8 x sym/asym x group 32/64/128/per channel, act-order, short last
//     group, partial last unit, odd group 96, 2:4) on every ISA here, both activation modes,
//     the threaded split forced on and off;
//  2. every batch size of the brief on a modest shape; 3. the real shapes (sampled output rows);
//  4. thread count independence; 5. int8 activation accuracy; 6. errors.
// Error = ||out - ref|| / ||ref|| over the output. The f32 activation path is compared with the
// exact reference; the int8 / int16 paths with the reference run on the activations as the kernels
// quantize them (per 32 kernel columns: d = absmax / 127 or 32767, round-to-nearest-even of x / d),
// so every bound is f32-rounding tight (kGqTol) and any wrong code, scale, zero point or column
// fails it. Test 5 measures what the quantized activations cost against the exact reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "lithe/kernels/group_quant.h"

namespace lithe::cpu {
namespace {

// f32 rounding of a few thousand products and the zero-point fold (observed <= ~3e-7).
constexpr double kGqTol = 2e-6;

using Restore = KernelKnobsRestore;

double rel_err(const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// N(0, 1) activations; per row a few blocks scaled by 20 (outlier channels) and one zeroed.
std::vector<float> random_acts(int64_t rows, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (auto& v : x) v = nd(rng);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / 32;
      float& v = x[static_cast<size_t>(r * n + i)];
      if ((r + b) % 7 == 3) v *= 20.0f;
      if (b == (r * 5) % (n / 32)) v = 0.0f;
    }
  return x;
}

// The activations as the int8 / int16 path sees them: per row, blocks of 32 kernel columns
// (x[perm[k]]) quantized to +-L (127 or 32767) and dequantized.
std::vector<float> quantized_view(const gq::Matrix& mat, const std::vector<float>& x, float L) {
  std::vector<float> out(x.size());
  const int64_t n = mat.n_in, rows = static_cast<int64_t>(x.size()) / n;
  auto col = [&](int64_t k) { return mat.perm.empty() ? k : static_cast<int64_t>(mat.perm[static_cast<size_t>(k)]); };
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    float* o = out.data() + r * n;
    for (int64_t b = 0; b < n; b += 32) {
      float amax = 0.0f;
      for (int64_t k = b; k < b + 32; ++k) amax = std::max(amax, std::fabs(xr[col(k)]));
      const float d = amax / L, id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int64_t k = b; k < b + 32; ++k) {
        const float s = std::min(L, std::max(-L, xr[col(k)] * id));
        o[col(k)] = d * std::nearbyint(s);
      }
    }
  }
  return out;
}

// Rows [r0, r0 + n) of a matrix (for references over sampled output rows).
gq::Matrix row_slice(const gq::Matrix& m, int64_t r0, int64_t n) {
  gq::Matrix s;
  s.fmt = m.fmt;
  s.n_out = n;
  s.n_in = m.n_in;
  const int64_t G = m.n_groups();
  s.codes.assign(m.codes.begin() + r0 * m.n_in, m.codes.begin() + (r0 + n) * m.n_in);
  s.scales.assign(m.scales.begin() + r0 * G, m.scales.begin() + (r0 + n) * G);
  s.zeros.assign(m.zeros.begin() + r0 * G, m.zeros.begin() + (r0 + n) * G);
  s.perm = m.perm;
  return s;
}

const char* acts_name(GqActs a) { return a == GqActs::f32 ? "f32" : a == GqActs::int8 ? "int8" : "int16"; }

std::string describe(const gq::Matrix& m) {
  return format_name(m.fmt, m.n_in) + (m.perm.empty() ? "" : " act-order") + " [" + std::to_string(m.n_out) + ", " +
         std::to_string(m.n_in) + "]";
}

// Runs `mat` at each batch size of ms (consecutive rows of one activation matrix) on each ISA,
// every activation mode, split forced off / on (both, or alternating over the batch sizes), and
// compares with the references. sample: output row blocks of 16 checked (0: all rows).
void check(const gq::Matrix& mat, const std::vector<int64_t>& ms, const std::vector<Isa>& isas, bool both_splits,
           std::mt19937& rng, int64_t sample = 0) {
  SCOPED_TRACE(describe(mat));
  auto packed = pack_gq(mat);
  ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
  const Tensor& w = packed.value();
  int64_t rows = 0;
  for (int64_t m : ms) rows += m;
  const auto x = random_acts(rows, mat.n_in, rng);
  const std::vector<float> xq[3] = {x, quantized_view(mat, x, 127.0f), quantized_view(mat, x, 32767.0f)};
  // Checked output rows (blocks of 16 spread over n_out), their references.
  std::vector<int64_t> out_rows;
  const int64_t n_out = mat.n_out;
  if (sample == 0 || sample * 16 >= n_out) {
    for (int64_t r = 0; r < n_out; ++r) out_rows.push_back(r);
  } else {
    for (int64_t s = 0; s < sample; ++s) {
      const int64_t r0 = (n_out - 16) * s / (sample - 1) / 16 * 16;
      for (int64_t r = r0; r < std::min(r0 + 16, n_out); ++r)
        if (out_rows.empty() || r > out_rows.back()) out_rows.push_back(r);
    }
  }
  const auto nck = static_cast<int64_t>(out_rows.size());
  // ref[0]: exact (f32 mode), ref[1]: int8 activations, ref[2]: int16 activations
  std::vector<float> ref[3];
  for (auto& r : ref) r.resize(static_cast<size_t>(rows * nck));
  {
    std::vector<float> tmp(static_cast<size_t>(rows * 16));
    for (int64_t i = 0; i < nck;) {
      int64_t n = 1;
      while (i + n < nck && n < 16 && out_rows[static_cast<size_t>(i + n)] == out_rows[static_cast<size_t>(i)] + n) ++n;
      const gq::Matrix sub = row_slice(mat, out_rows[static_cast<size_t>(i)], n);
      for (int pass = 0; pass < 3; ++pass) {
        gq::reference_linear(sub, xq[pass].data(), rows, tmp.data());
        auto& dst = ref[pass];
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t k = 0; k < n; ++k) dst[static_cast<size_t>(r * nck + i + k)] = tmp[static_cast<size_t>(r * n + k)];
      }
      i += n;
    }
  }
  std::vector<float> y, got;
  int variant = 0;
  for (Isa isa : isas) {
    force_isa(isa);
    for (GqActs acts : {GqActs::f32, GqActs::int8, GqActs::int16}) {
      force_gq_acts(acts);
      const auto& want = ref[acts == GqActs::f32 ? 0 : acts == GqActs::int8 ? 1 : 2];
      for (int split_pass = 0; split_pass < (both_splits ? 2 : 1); ++split_pass) {
        int64_t row0 = 0;
        for (int64_t m : ms) {
          const bool split = both_splits ? split_pass == 1 : (variant++ % 2 == 1);
          force_split(split);
          y.assign(static_cast<size_t>(m * n_out), std::nanf(""));
          const Status st = linear(w, x.data() + row0 * mat.n_in, m, y.data());
          ASSERT_TRUE(st.is_ok()) << st.to_string();
          got.resize(static_cast<size_t>(m * nck));
          for (int64_t r = 0; r < m; ++r)
            for (int64_t k = 0; k < nck; ++k)
              got[static_cast<size_t>(r * nck + k)] = y[static_cast<size_t>(r * n_out + out_rows[static_cast<size_t>(k)])];
          const double err = rel_err(got.data(), want.data() + row0 * nck, got.size());
          EXPECT_LE(err, kGqTol) << isa_name(isa) << " " << acts_name(acts) << " acts, m=" << m
                                 << (split ? ", split" : ", one thread");
          row0 += m;
        }
      }
    }
  }
}

QuantFormat fmt(int bits, int64_t group, bool sym, bool sparse24 = false) {
  QuantFormat f;
  f.bits = bits;
  f.group = group;
  f.sym = sym;
  f.sparse24 = sparse24;
  return f;
}

// 1. Every format; n_in cycles through a short last group / partial last unit (576 = 4.5 units,
// 224 = 1.75, 160 = 1.25) and whole units (384). group 0 = per channel.
TEST(GqCpu, EveryFormatEveryIsa) {
  Restore restore;
  std::mt19937 rng(11);
  const int64_t ins[] = {576, 224, 160, 384};
  int k = 0;
  for (int bits : {2, 3, 4, 8})
    for (bool sym : {false, true})
      for (int64_t group : {32, 64, 128, 0}) {
        const int64_t n_in = ins[k % 4];
        const bool act_order = k % 3 == 1;
        const int64_t g = group == 0 ? n_in : std::min(group, n_in);
        const gq::Matrix mat = gq::random_matrix(fmt(bits, g, sym), 83, n_in, 100 + k, act_order);
        check(mat, {1, 3, 5, 17}, available_isas(), false, rng);
        ++k;
      }
  // Odd group (3 blocks), act-order with per-channel scales, 2:4 sparse int4 (dense on the CPU).
  check(gq::random_matrix(fmt(4, 96, false), 40, 576, 7, true), {1, 6}, available_isas(), false, rng);
  check(gq::random_matrix(fmt(8, 576, false), 40, 576, 8, true), {2, 9}, available_isas(), false, rng);
  for (bool sym : {false, true})
    check(gq::random_matrix(fmt(4, 128, sym, true), 72, 576, 9, sym), {1, 4, 7}, available_isas(), false, rng);
}

// 2. Every batch size of the brief (matrix-vector m <= 4, tiles with every remainder above).
TEST(GqCpu, EveryBatchSize) {
  Restore restore;
  std::mt19937 rng(12);
  const std::vector<int64_t> ms = {1, 2, 3, 4, 8, 12, 16, 24, 32, 48, 64, 118, 128};
  const struct {
    QuantFormat f;
    bool act_order;
  } cases[] = {{fmt(4, 128, false), true}, {fmt(3, 64, true), false}, {fmt(8, 192, false), false},
               {fmt(2, 32, false), true}};
  std::vector<Isa> simd;
  for (Isa i : available_isas())
    if (i != Isa::scalar) simd.push_back(i);
  for (const auto& c : cases) {
    const gq::Matrix mat = gq::random_matrix(c.f, 77, 192, 21, c.act_order);
    check(mat, ms, simd, true, rng);
    check(mat, {1, 2, 5, 12}, {Isa::scalar}, true, rng);
  }
}

// 3. The real shapes (n_in x n_out), int4 g128 (act-order on some), sampled output rows.
TEST(GqCpu, RealShapes) {
  Restore restore;
  std::mt19937 rng(13);
  const struct {
    int64_t n_in, n_out;
  } shapes[] = {{4096, 4096}, {4096, 11008}, {11008, 4096}, {4096, 14336}, {14336, 4096}, {576, 1536}, {1536, 576}};
  std::vector<Isa> simd;
  for (Isa i : available_isas())
    if (i != Isa::scalar) simd.push_back(i);
  int k = 0;
  for (const auto& s : shapes) {
    const bool act_order = k % 2 == 0;
    const gq::Matrix mat = gq::random_matrix(fmt(4, 128, k % 3 == 1), s.n_out, s.n_in, 300 + k, act_order);
    check(mat, {1, 3, 16}, simd, false, rng, 12);
    check(mat, {1}, {Isa::scalar}, false, rng, 4);
    ++k;
  }
  // Per channel and int8 at a real size.
  check(gq::random_matrix(fmt(8, 4096, false), 4096, 4096, 400, false), {1, 5}, simd, false, rng, 8);
  check(gq::random_matrix(fmt(3, 128, true), 1536, 576, 401, true), {1, 5}, simd, false, rng, 8);
}

// 4. Splitting rows over threads changes no output bit.
TEST(GqCpu, ThreadCountDoesNotChangeResults) {
  Restore restore;
  std::mt19937 rng(14);
  force_split(true);
  const gq::Matrix mat = gq::random_matrix(fmt(4, 64, false), 333, 224, 5, true);
  const Tensor w = pack_gq(mat).value();
  for (Isa isa : available_isas()) {
    force_isa(isa);
    for (GqActs acts : {GqActs::f32, GqActs::int8, GqActs::int16}) {
      force_gq_acts(acts);
      for (int64_t m : {1, 7}) {
        const auto x = random_acts(m, mat.n_in, rng);
        expect_thread_invariant(w, x, m, mat.n_out, std::string(isa_name(isa)) + ", m=" + std::to_string(m));
      }
    }
  }
  set_num_threads(0);
}

// 5. The quantized-activation paths against the exact reference: what 8 / 16-bit activations
// cost. int8 (as llama.cpp's q8_0 activations) gives ~0.8-0.95% per output on these Gaussian
// activations with 20x outlier blocks, int16 ~3.5e-5. Bounds 1.5% and 1e-4; a wrong code, scale
// or zero point gives O(1).
TEST(GqCpu, QuantizedActivationAccuracy) {
  Restore restore;
  std::mt19937 rng(15);
  for (int bits : {2, 4, 8}) {
    const gq::Matrix mat = gq::random_matrix(fmt(bits, 128, false), 256, 1536, 50 + bits, true);
    const Tensor w = pack_gq(mat).value();
    const int64_t m = 8;
    const auto x = random_acts(m, mat.n_in, rng);
    std::vector<float> ref(static_cast<size_t>(m * mat.n_out)), y(ref.size());
    gq::reference_linear(mat, x.data(), m, ref.data());
    for (GqActs acts : {GqActs::int8, GqActs::int16}) {
      force_gq_acts(acts);
      ASSERT_TRUE(linear(w, x.data(), m, y.data()).is_ok());
      const double err = rel_err(y.data(), ref.data(), y.size());
      std::printf("int%d g128, %s activations: error %.2e (relative, vs exact)\n", bits, acts_name(acts), err);
      EXPECT_LE(err, acts == GqActs::int8 ? 1.5e-2 : 1e-4) << acts_name(acts);
      EXPECT_GT(err, acts == GqActs::int8 ? 1e-4 : 1e-7) << "quantized activations should show some error";
    }
  }
}

// 6. Errors name the shape, the format and what is required.
TEST(GqCpu, UnsupportedShapesAndBadArguments) {
  EXPECT_TRUE(linear_supports(DType::gq));
  // n_in not a multiple of 32
  auto r = pack_gq(gq::random_matrix(fmt(4, 100, false), 8, 100, 1, false));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::unsupported);
  EXPECT_NE(r.status().message().find("[8, 100]"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("multiple of 32"), std::string::npos) << r.status().message();
  // group not a multiple of 32 (and not per channel)
  r = pack_gq(gq::random_matrix(fmt(3, 48, true), 8, 192, 2, false));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::unsupported);
  EXPECT_NE(r.status().message().find("[8, 192]"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("group 48"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("int3"), std::string::npos) << r.status().message();
  // per channel with any n_in % 32 == 0 is fine
  EXPECT_TRUE(pack_gq(gq::random_matrix(fmt(4, 96, true), 8, 96, 3, false)).is_ok());
  // an invalid matrix (code over maxq) is the validator's error
  gq::Matrix bad = gq::random_matrix(fmt(2, 32, false), 4, 64, 4, false);
  bad.codes[5] = 9;
  r = pack_gq(bad);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);

  const Tensor w = pack_gq(gq::random_matrix(fmt(4, 32, false), 4, 64, 5, false)).value();
  std::vector<float> x(64), y(4);
  EXPECT_EQ(linear(w, x.data(), -1, y.data()).code(), StatusCode::invalid_argument);
  EXPECT_EQ(linear(w, nullptr, 1, y.data()).code(), StatusCode::invalid_argument);
  EXPECT_TRUE(linear(w, nullptr, 0, nullptr).is_ok());
  // a gq tensor laid out for another backend
  PackedWeight other = *w.packed();
  other.layout = 0x47454d56;
  const Tensor foreign = Tensor::packed(w.buffer(), 0, other).value();
  const Status st = linear(foreign, x.data(), 1, y.data());
  EXPECT_EQ(st.code(), StatusCode::unsupported);
  EXPECT_NE(st.message().find("another backend"), std::string::npos) << st.message();
  // sections that do not fit the tensor
  PackedWeight small = *w.packed();
  small.bytes = 64;
  const Tensor cut = Tensor::packed(w.buffer(), 0, small).value();
  EXPECT_EQ(linear(cut, x.data(), 1, y.data()).code(), StatusCode::invalid_argument);
}

// LITHE_GQ_ACTS is read once per process: checked in a fresh one.
TEST(GqCpuDeathTest, EnvironmentSelectsActivationMode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("LITHE_GQ_ACTS", "f32", 1);
  EXPECT_EXIT(std::exit(10 + static_cast<int>(gq_acts())), ::testing::ExitedWithCode(12), "");
  ::setenv("LITHE_GQ_ACTS", "int8", 1);
  EXPECT_EXIT(std::exit(10 + static_cast<int>(gq_acts())), ::testing::ExitedWithCode(10), "");
  ::setenv("LITHE_GQ_ACTS", "int4", 1);  // unknown: a warning, then the default int16
  EXPECT_EXIT(std::exit(10 + static_cast<int>(gq_acts())), ::testing::ExitedWithCode(11), "int4");
  ::unsetenv("LITHE_GQ_ACTS");
}

}  // namespace
}  // namespace lithe::cpu
