// Tests of the CPU linear kernels (kernels/cpu, kernels/ref/cpu_ref.cpp):
//  1. every ISA available here (force_isa) against cpu::ref::linear, for every weight dtype, on
//     fresh random weights (random block bytes: every quant, scale and min bit pattern) and
//     activations, odd and ragged shapes, unaligned weight rows, 1..3 threads;
//  2. cpu::ref::linear against an independent f32 computation (ref::dequantize_row + double dot),
//     with a tolerance that fits 8-bit activation quantization;
//  3. argument errors; ISA selection.
// Errors are ||out - ref|| / ||ref|| over the whole output.
// Row ops and attention: test_cpu_ops.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "lithe/core/half.h"
#include "lithe/core/thread_pool.h"
#include "lithe/kernels/cpu.h"
#include "cpu_test_util.h"
#include "lithe/kernels/ggml_quants.h"

namespace lithe::cpu {
namespace {

using IsaRestore = KernelKnobsRestore;

double rel_err(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool all_finite(const std::vector<float>& v) {
  for (float f : v)
    if (!std::isfinite(f)) return false;
  return true;
}

uint16_t rand_half(std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  return f32_to_f16(u(rng));
}
void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// Byte offsets of the f16 fields of a block (scales and mins); everything else is random bytes.
std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::q4_0: return {0};
    case DType::q4_1: return {0, 2};
    case DType::q8_0: return {0};
    case DType::q4_k: return {0, 2};
    case DType::q6_k: return {208};
    default: return {};
  }
}

// A weight [n_out, n_in] of dtype t placed `offset` bytes into its buffer (offset 1: every row
// starts at an odd address). Block types get random bytes with random small f16 scales/mins (so
// every quant, 6-bit scale and min pattern occurs); float types get N(0, 1) with a per-row scale.
Tensor random_weight(DType t, int64_t n_out, int64_t n_in, std::mt19937& rng, size_t offset = 0) {
  const int64_t row = row_bytes(t, n_in).value();
  auto buf = alloc_host(static_cast<size_t>(row * n_out) + offset).value();
  auto* base = static_cast<uint8_t*>(buf->data()) + offset;
  const auto& tr = dtype_traits(t);
  if (tr.is_block) {
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < row * n_out; ++i) base[i] = static_cast<uint8_t>(byte(rng));
    const auto fields = f16_fields(t);
    for (int64_t b = 0; b < n_out * (n_in / tr.block_elems); ++b)
      for (size_t f = 0; f < fields.size(); ++f)
        put16(base + b * tr.block_bytes + fields[f], rand_half(rng, f == 0 ? -0.02f : -0.01f, 0.02f));
  } else {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int64_t r = 0; r < n_out; ++r) {
      const float scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
      for (int64_t i = 0; i < n_in; ++i) {
        const float v = nd(rng) * scale;
        uint8_t* p = base + r * row + i * tr.block_bytes;
        if (t == DType::f32) std::memcpy(p, &v, 4);
        else if (t == DType::f16) put16(p, f32_to_f16(v));
        else put16(p, f32_to_bf16(v));
      }
    }
  }
  return Tensor::view(buf, offset, t, {n_out, n_in}).value();
}

// Activations: N(0, 1) with a few blocks scaled by 100 or 1e-3 and one all-zero block per row.
std::vector<float> random_acts(int64_t m, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * n));
  for (auto& v : x) v = nd(rng);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < n / 32; ++b) {
      float s = 1.0f;
      if ((r + b) % 11 == 3) s = 100.0f;
      if ((r + b) % 13 == 5) s = 1e-3f;
      if (b == (r % (n / 32)) && n >= 64) s = 0.0f;
      for (int64_t i = 0; i < 32; ++i) x[static_cast<size_t>(r * n + b * 32 + i)] *= s;
    }
  }
  return x;
}

const DType kDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::q4_0,
                         DType::q4_1, DType::q8_0, DType::q4_k, DType::q6_k};

bool is_k(DType t) { return t == DType::q4_k || t == DType::q6_k; }

struct Shape3 {
  int64_t m, n_out, n_in;
};

// Every m x n_out pair of the brief, n_in cycling through block-aligned sizes (ragged tails of the
// 128- and 64-value chunks included; 800 and 416 end in 9 and 13 of the 16 groups of an AVX-512
// q4_1 superchunk); large products shrink n_in to keep the scalar reference fast.
std::vector<Shape3> linear_shapes(DType t) {
  const int64_t ms[] = {1, 2, 3, 5, 17, 64, 118};
  const int64_t outs[] = {1, 3, 17, 118, 576, 1536};
  std::vector<int64_t> ins;
  if (is_k(t)) ins = {256, 512, 768, 1536};
  else if (dtype_traits(t).is_block) ins = {32, 96, 160, 576, 1536, 64, 224, 800, 416};
  else ins = {7, 33, 100, 576, 1536, 17, 64};
  std::vector<Shape3> out;
  size_t k = 0;
  for (int64_t m : ms)
    for (int64_t n_out : outs) {
      int64_t n_in = ins[k++ % ins.size()];
      while (m * n_out * n_in > 6'000'000 && n_in > ins.front()) n_in = ins.front();
      out.push_back({m, n_out, n_in});
    }
  return out;
}

class LinearTest : public ::testing::TestWithParam<DType> {};

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); }

// 1. Every ISA against the reference.
TEST_P(LinearTest, MatchesReferenceOnEveryIsa) {
  const DType t = GetParam();
  IsaRestore restore;
  std::mt19937 rng(1234 + static_cast<int>(t));
  // Same integer sums; only f32 rounding and summation order differ.
  const double tol = std::getenv("LITHE_TEST_TOL0") ? 0.0 : 2e-5;
  int checked = 0;
  for (const Shape3& s : linear_shapes(t)) {
    const Tensor w = random_weight(t, s.n_out, s.n_in, rng, checked % 2);
    const auto x = random_acts(s.m, s.n_in, rng);
    std::vector<float> ref(static_cast<size_t>(s.m * s.n_out));
    ASSERT_TRUE(ref::linear(w, x.data(), s.m, ref.data()).is_ok());
    ASSERT_TRUE(all_finite(ref));
    force_split(checked % 3 == 0 ? std::optional<bool>(false) : std::optional<bool>(true));
    for (Isa isa : available_isas()) {
      force_isa(isa);
      std::vector<float> y(ref.size(), std::nanf(""));
      const Status st = linear(w, x.data(), s.m, y.data());
      ASSERT_TRUE(st.is_ok()) << st.to_string();
      const double err = rel_err(y, ref);
      EXPECT_TRUE(all_finite(y)) << isa_name(isa) << " m=" << s.m << " n_out=" << s.n_out << " n_in=" << s.n_in;
      EXPECT_LE(err, tol) << dtype_name(t) << " " << isa_name(isa) << " m=" << s.m << " n_out=" << s.n_out
                          << " n_in=" << s.n_in;
      ++checked;
    }
  }
  force_split(std::nullopt);
  EXPECT_GT(checked, 40);
}

// 2. The reference against f32 math on the dequantized weights and unquantized activations.
TEST_P(LinearTest, ReferenceMatchesDequantizedF32) {
  const DType t = GetParam();
  std::mt19937 rng(99 + static_cast<int>(t));
  // Float weights: f32 summation only. Block weights: the 8-bit activations (step absmax/127 per
  // 32 or 256 values) give ~0.5-0.7% relative error on Gaussian data; 2% leaves room, a wrong
  // scale, nibble or sign gives O(1).
  const bool block = dtype_traits(t).is_block;
  const double tol = block ? 2e-2 : 1e-5;
  for (const Shape3& s : {Shape3{1, 96, 512}, Shape3{5, 33, 1536}, Shape3{17, 64, 768}}) {
    const Tensor w = random_weight(t, s.n_out, s.n_in, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(s.m * s.n_in));
    for (auto& v : x) v = nd(rng);
    std::vector<float> wf(static_cast<size_t>(s.n_in)), want(static_cast<size_t>(s.m * s.n_out));
    for (int64_t r = 0; r < s.n_out; ++r) {
      ASSERT_TRUE(lithe::ref::dequantize_row(t, static_cast<const uint8_t*>(w.data()) + r * w.strides()[0], wf.data(),
                                             s.n_in)
                      .is_ok());
      for (int64_t c = 0; c < s.m; ++c) {
        double acc = 0;
        for (int64_t i = 0; i < s.n_in; ++i) acc += static_cast<double>(wf[static_cast<size_t>(i)]) * x[static_cast<size_t>(c * s.n_in + i)];
        want[static_cast<size_t>(c * s.n_out + r)] = static_cast<float>(acc);
      }
    }
    std::vector<float> got(want.size());
    ASSERT_TRUE(ref::linear(w, x.data(), s.m, got.data()).is_ok());
    const double err = rel_err(got, want);
    EXPECT_LE(err, tol) << dtype_name(t) << " m=" << s.m << " n_out=" << s.n_out << " n_in=" << s.n_in;
    if (block) {
      EXPECT_GT(err, 1e-4) << "8-bit activations should show some error";
    }
  }
}

// Weights made by the reference quantizer (the realistic distribution, incl. q8_0 at +-127),
// with the active (best) ISA against the reference.
TEST_P(LinearTest, QuantizedRealisticWeights) {
  const DType t = GetParam();
  if (!lithe::ref::can_quantize(t)) GTEST_SKIP();
  std::mt19937 rng(7 + static_cast<int>(t));
  const int64_t n_out = 118, n_in = 1536, m = 3;
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> wf(static_cast<size_t>(n_out * n_in));
  for (auto& v : wf) v = nd(rng);
  Tensor w = Tensor::empty(t, {n_out, n_in}).value();
  for (int64_t r = 0; r < n_out; ++r)
    ASSERT_TRUE(lithe::ref::quantize_row(t, wf.data() + r * n_in, static_cast<uint8_t*>(w.data()) + r * w.strides()[0], n_in)
                    .is_ok());
  const auto x = random_acts(m, n_in, rng);
  std::vector<float> ref(static_cast<size_t>(m * n_out)), y(ref.size());
  ASSERT_TRUE(ref::linear(w, x.data(), m, ref.data()).is_ok());
  ASSERT_TRUE(linear(w, x.data(), m, y.data()).is_ok());
  EXPECT_LE(rel_err(y, ref), 2e-5) << isa_name(active_isa());
}

// Splitting rows over threads must not change any output bit (every ISA; splitting forced, so the
// threaded path runs whatever the measured pool latency).
TEST_P(LinearTest, ThreadCountDoesNotChangeResults) {
  const DType t = GetParam();
  IsaRestore restore;
  std::mt19937 rng(5 + static_cast<int>(t));
  const int64_t n_in = is_k(t) ? 512 : 160;
  force_split(true);
  for (Isa isa : available_isas()) {
    force_isa(isa);
    for (int64_t m : {1, 7}) {
      const Tensor w = random_weight(t, 333, n_in, rng);
      const auto x = random_acts(m, n_in, rng);
      expect_thread_invariant(w, x, m, 333, std::string(isa_name(isa)) + ", m=" + std::to_string(m));
    }
  }
  force_split(std::nullopt);
  set_num_threads(0);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, LinearTest, ::testing::ValuesIn(kDTypes), dtype_param_name);

// 3. Errors name the offending value.
TEST(CpuLinear, RejectsUnsupportedDtype) {
  EXPECT_FALSE(linear_supports(DType::q5_0));
  EXPECT_TRUE(linear_supports(DType::q4_1));
  const Tensor w = Tensor::empty(DType::q5_0, {4, 32}).value();
  std::vector<float> x(32), y(4);
  for (auto fn : {&linear, &ref::linear}) {
    const Status st = fn(w, x.data(), 1, y.data());
    EXPECT_EQ(st.code(), StatusCode::unsupported);
    EXPECT_NE(st.message().find("q5_0"), std::string::npos) << st.message();
  }
}

TEST(CpuLinear, RejectsBadShapesAndPointers) {
  std::vector<float> x(64), y(64);
  const Tensor w3 = Tensor::empty(DType::f32, {2, 2, 8}).value();
  Status st = linear(w3, x.data(), 1, y.data());
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("[2, 2, 8]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("2-D"), std::string::npos) << st.message();

  const Tensor w = Tensor::empty(DType::q4_0, {2, 64}).value();
  st = linear(w, nullptr, 1, y.data());
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("null x"), std::string::npos) << st.message();
  st = linear(w, x.data(), -3, y.data());
  EXPECT_NE(st.message().find("-3"), std::string::npos) << st.message();
  EXPECT_TRUE(linear(w, nullptr, 0, nullptr).is_ok());  // m = 0: nothing to do
  EXPECT_FALSE(linear(Tensor(), x.data(), 1, y.data()).is_ok());
}

TEST(CpuIsa, DetectionAndOverride) {
  IsaRestore restore;
  EXPECT_EQ(isa_from_name("avx512"), Isa::avx512);
  EXPECT_EQ(isa_from_name("avx2"), Isa::avx2);
  EXPECT_EQ(isa_from_name("scalar"), Isa::scalar);
  EXPECT_FALSE(isa_from_name("sse9").has_value());
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512}) EXPECT_EQ(isa_from_name(isa_name(i)), i);
  force_isa(Isa::scalar);
  EXPECT_EQ(active_isa(), Isa::scalar);
  force_isa(Isa::avx512);  // clamped to what the CPU has
  EXPECT_EQ(active_isa(), detected_isa());
#if defined(__x86_64__)
  // Every x86-64 CPU this project targets has AVX2; print what was found for the record.
  std::printf("detected ISA: %s\n", std::string(isa_name(detected_isa())).c_str());
#endif
}

// LITHE_ISA is read once per process, so the check runs in a fresh one (the "threadsafe" death-test
// style re-executes this binary for the statement).
TEST(CpuIsaDeathTest, EnvironmentOverride) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ::setenv("LITHE_ISA", "scalar", 1);
  EXPECT_EXIT(std::exit(10 + static_cast<int>(active_isa())), ::testing::ExitedWithCode(10), "");
  ::setenv("LITHE_ISA", "avx9000", 1);  // unknown: a warning, then the detected ISA
  EXPECT_EXIT(std::exit(10 + static_cast<int>(active_isa())),
              ::testing::ExitedWithCode(10 + static_cast<int>(detected_isa())), "avx9000");
  ::unsetenv("LITHE_ISA");
}

}  // namespace
}  // namespace lithe::cpu
