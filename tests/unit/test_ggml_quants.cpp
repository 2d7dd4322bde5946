// Tests of the scalar reference (de)quantizers (kernels/ref/ggml_quants.cpp) and of convert().
//  1. golden: bit-exact dequantization of tests/data/quants/*.bin, made by tests/gen/gen_quant_golden.py
//     with the PyPI gguf package's numpy code as the independent reference;
//  2. round trips of every quantizable type on several kinds of data, with per-type error bounds;
//  3. argument errors; 4. convert().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lithe/core/half.h"
#include "lithe/core/tensor.h"
#include "lithe/kernels/convert.h"
#include "lithe/kernels/ggml_quants.h"

namespace lithe {
namespace {

DType dt(const std::string& name) {
  auto t = dtype_from_name(name);
  EXPECT_TRUE(t.has_value()) << name;
  return t.value_or(DType::f32);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------------------------
// 1. golden files

struct Golden {
  std::vector<float> src;  // empty unless the file has flags & 1
  std::vector<uint8_t> raw;
  std::vector<float> want;
};

// Format: see tests/gen/gen_quant_golden.py.
bool load_golden(const std::string& file, Golden& g, std::string& why) {
  const std::string path = std::string(LITHE_TEST_DATA) + "/quants/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = "cannot open " + path + " (regenerate with tests/gen/gen_quant_golden.py)";
    return false;
  }
  char magic[4];
  uint32_t hdr[3];
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  if (!in || std::memcmp(magic, "LQG1", 4) != 0) {
    why = path + ": bad header";
    return false;
  }
  const uint32_t n = hdr[0], nbytes = hdr[1], flags = hdr[2];
  if (flags & 1u) {
    g.src.resize(n);
    in.read(reinterpret_cast<char*>(g.src.data()), static_cast<std::streamsize>(n) * 4);
  }
  g.raw.resize(nbytes);
  in.read(reinterpret_cast<char*>(g.raw.data()), nbytes);
  g.want.resize(n);
  in.read(reinterpret_cast<char*>(g.want.data()), static_cast<std::streamsize>(n) * 4);
  if (!in || in.peek() != std::char_traits<char>::eof()) {
    why = path + ": truncated or trailing bytes";
    return false;
  }
  return true;
}

// Dequantizes g.raw as `t` (at an odd address too) and requires bit-exact equality with g.want.
void expect_golden_dequant(DType t, const Golden& g, const std::string& file) {
  const auto n = static_cast<int64_t>(g.want.size());
  auto rb = row_bytes(t, n);
  ASSERT_TRUE(rb.is_ok()) << file << ": " << rb.status().to_string();
  ASSERT_EQ(static_cast<size_t>(*rb), g.raw.size()) << file;
  for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {  // blocks may sit at any byte address
    std::vector<uint8_t> buf(g.raw.size() + misalign);
    std::memcpy(buf.data() + misalign, g.raw.data(), g.raw.size());
    std::vector<float> got(g.want.size(), -1.0f);
    Status st = ref::dequantize_row(t, buf.data() + misalign, got.data(), n);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (bits(got[i]) != bits(g.want[i]) && ++bad <= 5)
        ADD_FAILURE() << file << " (misaligned by " << misalign << ") value " << i << " (block "
                      << static_cast<int64_t>(i) / dtype_traits(t).block_elems << "): got " << got[i]
                      << " want " << g.want[i];
    }
    EXPECT_EQ(bad, 0) << file << ": " << bad << " of " << got.size() << " values differ";
  }
}

class GoldenDequant : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenDequant, BitExactWithGguf) {
  const std::string name = GetParam();
  Golden g;
  std::string why;
  ASSERT_TRUE(load_golden(name + ".bin", g, why)) << why;
  ASSERT_FALSE(g.want.empty());
  expect_golden_dequant(dt(name), g, name + ".bin");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GoldenDequant,
                         ::testing::Values("f32", "f16", "bf16", "f64", "i8", "i16", "i32", "q4_0", "q4_1",
                                           "q5_0", "q5_1", "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k",
                                           "q6_k", "q8_k"),
                         [](const auto& p) { return p.param; });

double rms_err(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}
double rms(const std::vector<float>& a) { return rms_err(a, std::vector<float>(a.size(), 0.0f)); }

class GoldenQuant : public ::testing::TestWithParam<std::string> {};

// gguf's own quantization of random floats: we decode its bytes bit-exactly, and our encoder is
// about as accurate as its (ggml's) encoder; f16/bf16 encoding is exact rounding, so bytes match.
TEST_P(GoldenQuant, DecodeGgufEncodingAndCompareOurs) {
  const std::string name = GetParam();
  const DType t = dt(name);
  Golden g;
  std::string why;
  ASSERT_TRUE(load_golden(name + "_q.bin", g, why)) << why;
  ASSERT_EQ(g.src.size(), g.want.size());
  expect_golden_dequant(t, g, name + "_q.bin");

  const auto n = static_cast<int64_t>(g.src.size());
  std::vector<uint8_t> ours(g.raw.size());
  ASSERT_TRUE(ref::quantize_row(t, g.src.data(), ours.data(), n).is_ok());
  if (t == DType::f16 || t == DType::bf16) {
    for (size_t i = 0; i < g.src.size(); ++i) {
      uint16_t a, b;
      std::memcpy(&a, &ours[2 * i], 2);
      std::memcpy(&b, &g.raw[2 * i], 2);
      EXPECT_EQ(a, b) << name << " of " << g.src[i] << " (f32 bits 0x" << std::hex << bits(g.src[i]) << ")";
    }
    return;
  }
  std::vector<float> back(g.src.size());
  ASSERT_TRUE(ref::dequantize_row(t, ours.data(), back.data(), n).is_ok());
  const double ours_err = rms_err(back, g.src), gguf_err = rms_err(g.want, g.src);
  EXPECT_LE(ours_err, gguf_err * 1.02 + 1e-7) << name << ": ours " << ours_err << " gguf " << gguf_err;
}

INSTANTIATE_TEST_SUITE_P(GgufQuantizers, GoldenQuant,
                         ::testing::Values("f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"),
                         [](const auto& p) { return p.param; });

// ---------------------------------------------------------------------------------------------
// 2. round trips

// Relative RMS error bounds for Gaussian-like data, from the bits. A block whose largest magnitude
// is A is quantized with step D, RMS error ~ D / sqrt(12). For normal data (sigma 1), A is about
// 2.5 over 32 values, 2.0 over 16, 3 over 256; the range (max - min) about 4.1 over 32, 3.5 over 16.
//   q8_0/q8_1  D = 2.5/127  -> 0.006     bound 0.01
//   q8_k       D = 3/127    -> 0.007     bound 0.012
//   q5_0       D = 2.5/16   -> 0.045     bound 0.08    q5_1  D = 4.1/31 -> 0.038   bound 0.08
//   q4_0       D = 2.5/8    -> 0.09      bound 0.15    q4_1  D = 4.1/15 -> 0.079   bound 0.15
//   q6_k       D = 2.0/32   -> 0.018     bound 0.04
//   q5_k       D = 4.1/31   -> 0.038     bound 0.08    q4_k  D = 4.1/15 -> 0.079   bound 0.15
//   q3_k       D = 2.0/4    -> 0.144     bound 0.25
//   q2_k       D = 3.5/3    -> 0.34      bound 0.5
// (plus a little for the 4/6/8-bit sub-block scales); f16: 2^-11 relative rounding -> bound 1e-3,
// bf16: 2^-8 -> bound 5e-3; f32 and f64 are exact.
struct Bound {
  const char* name;
  double rel_rms;
};
constexpr Bound kBounds[] = {
    {"f32", 0.0},    {"f64", 0.0},   {"f16", 1e-3},  {"bf16", 5e-3}, {"q8_0", 0.01},
    {"q8_1", 0.01},  {"q8_k", 0.012}, {"q5_0", 0.08}, {"q5_1", 0.08}, {"q4_0", 0.15},
    {"q4_1", 0.15},  {"q6_k", 0.04}, {"q5_k", 0.08}, {"q4_k", 0.15}, {"q3_k", 0.25},
    {"q2_k", 0.5},
};

enum class Data { normal, weights, outliers, zeros, constant, negative, mixed_scale };
const char* data_name(Data d) {
  switch (d) {
    case Data::normal: return "normal";
    case Data::weights: return "weights";
    case Data::outliers: return "outliers";
    case Data::zeros: return "zeros";
    case Data::constant: return "constant";
    case Data::negative: return "negative";
    case Data::mixed_scale: return "mixed_scale";
  }
  return "?";
}

std::vector<float> make_data(Data kind, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  switch (kind) {
    case Data::normal: break;
    case Data::weights:  // the magnitude of LLM weights
      for (auto& v : x) v *= 0.02f;
      break;
    case Data::outliers:
      for (size_t i = 0; i < x.size(); ++i)
        if (rng() % 100 == 0) x[i] *= 40.0f;
      break;
    case Data::zeros: std::fill(x.begin(), x.end(), 0.0f); break;
    case Data::constant: std::fill(x.begin(), x.end(), 2.5f); break;
    case Data::negative:
      for (auto& v : x) v = -std::fabs(v) - 0.5f;
      break;
    case Data::mixed_scale:  // each group of 16 values at its own magnitude, 2^-6 .. 2^5
      for (size_t i = 0; i < x.size(); ++i) x[i] *= std::ldexp(1.0f, static_cast<int>((i / 16 * 7) % 12) - 6);
      break;
  }
  return x;
}

struct RoundTrip {
  std::vector<float> y;
  std::vector<uint8_t> bytes;
};
RoundTrip round_trip(DType t, const std::vector<float>& x) {
  const auto n = static_cast<int64_t>(x.size());
  RoundTrip r;
  r.bytes.assign(static_cast<size_t>(elems_to_bytes(t, n)), 0xAB);
  r.y.assign(x.size(), NAN);
  Status s1 = ref::quantize_row(t, x.data(), r.bytes.data(), n);
  EXPECT_TRUE(s1.is_ok()) << s1.to_string();
  Status s2 = ref::dequantize_row(t, r.bytes.data(), r.y.data(), n);
  EXPECT_TRUE(s2.is_ok()) << s2.to_string();
  return r;
}

class RoundTripTest : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTripTest, ErrorWithinBound) {
  const Bound b = GetParam();
  const DType t = dt(b.name);
  ASSERT_TRUE(ref::can_quantize(t));
  ASSERT_TRUE(ref::can_dequantize(t));
  const int64_t n = 4 * 256;
  for (Data kind : {Data::normal, Data::weights, Data::outliers, Data::zeros, Data::constant, Data::negative,
                    Data::mixed_scale}) {
    SCOPED_TRACE(std::string(b.name) + " on " + data_name(kind));
    const std::vector<float> x = make_data(kind, n, 1234u + static_cast<uint32_t>(kind));
    const RoundTrip r = round_trip(t, x);
    for (float v : r.y) ASSERT_TRUE(std::isfinite(v));
    const double err = rms_err(r.y, x), ref = rms(x);
    if (kind == Data::zeros) {
      EXPECT_EQ(err, 0.0);
      continue;
    }
    if (kind == Data::constant) {  // only the f16 scale rounding is left (bf16: its own rounding)
      EXPECT_LE(err / ref, t == DType::bf16 ? 4e-3 : 1e-3);
      continue;
    }
    double bound = b.rel_rms;
    // outliers: a block holding a 40-sigma value quantizes its other values with a step ~15x
    // larger; they dominate the error (q8_k worst: each 256-value block holds ~2.5 outliers).
    if (kind == Data::outliers) bound *= 3;
    // mixed_scale: the k-quants share one super-block scale across sub-blocks 2^11 apart in magnitude,
    // so the smallest sub-blocks get few scale codes; the relative error is still small overall
    // (the large sub-blocks dominate the norm) but allow a little more.
    if (kind == Data::mixed_scale) bound *= 1.5;
    EXPECT_LE(err / ref, bound) << "relative RMS error " << err / ref;
  }
}

// Re-encoding decoded values: exact for the float types and the legacy types, whose block scale
// (and min) is set by values that land on the extreme codes, so the second pass finds the same
// f16 scale and the same codes. The k-quants re-derive each sub-block's scale from the range of
// its decoded values, which need not use the extreme codes, so a second pass may choose other
// integer scales: close, not exact (measured: the second pass costs 6-55% of the first).
TEST_P(RoundTripTest, RequantizeIsAFixedPoint) {
  const Bound b = GetParam();
  const DType t = dt(b.name);
  const bool exact = !dtype_traits(t).is_block || dtype_traits(t).block_elems == 32 || t == DType::q8_k;
  for (Data kind : {Data::normal, Data::outliers, Data::negative, Data::weights}) {
    SCOPED_TRACE(std::string(b.name) + " on " + data_name(kind));
    const std::vector<float> x = make_data(kind, 4 * 256, 77u + static_cast<uint32_t>(kind));
    const RoundTrip r1 = round_trip(t, x);
    const RoundTrip r2 = round_trip(t, r1.y);
    if (exact) {
      int bad = 0;
      for (size_t i = 0; i < x.size(); ++i) bad += bits(r1.y[i]) != bits(r2.y[i]);
      EXPECT_EQ(bad, 0) << "values changed on re-encoding";
      EXPECT_EQ(r1.bytes, r2.bytes);
    } else {
      const double e1 = rms_err(r1.y, x), e2 = rms_err(r2.y, r1.y);
      EXPECT_LE(e2, 0.7 * e1) << "first pass " << e1 << ", second " << e2;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllQuantizable, RoundTripTest, ::testing::ValuesIn(kBounds),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(GgmlQuants, QuantizableAndDequantizableSets) {
  for (const char* name : {"f32", "f16", "bf16", "f64", "i8", "i16", "i32", "q4_0", "q4_1", "q5_0", "q5_1",
                           "q8_0", "q8_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q8_k"})
    EXPECT_TRUE(ref::can_dequantize(dt(name))) << name;
  for (const Bound& b : kBounds) EXPECT_TRUE(ref::can_quantize(dt(b.name))) << b.name;
  for (const char* name : {"i64", "u8", "bool", "f8_e4m3", "f8_e5m2"}) {
    EXPECT_FALSE(ref::can_dequantize(dt(name))) << name;
    EXPECT_FALSE(ref::can_quantize(dt(name))) << name;
  }
  for (const char* name : {"i8", "i16", "i32"}) EXPECT_FALSE(ref::can_quantize(dt(name))) << name;
  EXPECT_FALSE(ref::can_quantize(static_cast<DType>(200)));
  EXPECT_FALSE(ref::can_dequantize(static_cast<DType>(200)));
}

// Hand-made blocks whose values are known, one per layout detail the golden files cannot name.
TEST(GgmlQuants, KnownLayouts) {
  // q4_0: value j < 16 from the low nibble of byte j, j >= 16 from the high nibble of byte j - 16.
  std::vector<uint8_t> b(18, 0);
  const uint16_t one = f32_to_f16(1.0f);
  std::memcpy(b.data(), &one, 2);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  std::vector<float> y(32);
  ASSERT_TRUE(ref::dequantize_row(DType::q4_0, b.data(), y.data(), 32).is_ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], static_cast<float>(15 - j - 8));
  }
  // q8_k: f32 scale, bsums ignored, bsums written by the quantizer.
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>(j % 17) - 8.0f;
  std::vector<uint8_t> q(292);
  ASSERT_TRUE(ref::quantize_row(DType::q8_k, x.data(), q.data(), 256).is_ok());
  for (int g = 0; g < 16; ++g) {
    int16_t bs;
    std::memcpy(&bs, &q[4 + 256 + 2 * g], 2);
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += static_cast<int8_t>(q[4 + 16 * g + l]);
    EXPECT_EQ(bs, sum) << "bsums[" << g << "]";
  }
  // q8_1: s = d * sum(qs).
  std::vector<uint8_t> q81(36);
  ASSERT_TRUE(ref::quantize_row(DType::q8_1, x.data(), q81.data(), 32).is_ok());
  uint16_t dh, sh;
  std::memcpy(&dh, &q81[0], 2);
  std::memcpy(&sh, &q81[2], 2);
  int sum = 0;
  for (int l = 0; l < 32; ++l) sum += static_cast<int8_t>(q81[4 + l]);
  EXPECT_NEAR(f16_to_f32(sh), f16_to_f32(dh) * static_cast<float>(sum), 1e-2);
}

TEST(GgmlQuants, NonFiniteInputDoesNotCrash) {
  std::vector<float> x(256, 1.0f);
  x[3] = NAN;
  x[100] = INFINITY;
  x[200] = -INFINITY;
  for (const Bound& b : kBounds) {
    const DType t = dt(b.name);
    std::vector<uint8_t> q(static_cast<size_t>(elems_to_bytes(t, 256)));
    std::vector<float> y(256);
    EXPECT_TRUE(ref::quantize_row(t, x.data(), q.data(), 256).is_ok()) << b.name;
    EXPECT_TRUE(ref::dequantize_row(t, q.data(), y.data(), 256).is_ok()) << b.name;
  }
  // Huge finite values: the f16 scales saturate instead of becoming inf.
  std::vector<float> big(256, 3.0e38f);
  std::vector<uint8_t> q(34 * 8);
  ASSERT_TRUE(ref::quantize_row(DType::q8_0, big.data(), q.data(), 256).is_ok());
  uint16_t dh;
  std::memcpy(&dh, q.data(), 2);
  EXPECT_EQ(dh, 0x7bff);
}

// ---------------------------------------------------------------------------------------------
// 3. errors

void expect_error_naming(const Status& s, const std::vector<std::string>& words) {
  ASSERT_FALSE(s.is_ok());
  for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.to_string() << " lacks " << w;
}

TEST(GgmlQuants, RowNotMultipleOfBlock) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> f(1024);
  expect_error_naming(ref::dequantize_row(DType::q4_0, buf.data(), f.data(), 33), {"q4_0", "33", "32"});
  expect_error_naming(ref::quantize_row(DType::q4_k, f.data(), buf.data(), 100), {"q4_k", "100", "256"});
  expect_error_naming(ref::quantize_row(DType::q6_k, f.data(), buf.data(), 32), {"q6_k", "32"});
  expect_error_naming(ref::dequantize_row(DType::q8_k, buf.data(), f.data(), 255), {"q8_k", "255"});
  expect_error_naming(ref::dequantize_row(DType::q8_0, buf.data(), f.data(), -32), {"q8_0", "-32"});
  EXPECT_EQ(ref::dequantize_row(DType::q4_0, buf.data(), f.data(), 33).code(), StatusCode::invalid_argument);
}

TEST(GgmlQuants, UnsupportedType) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> f(1024);
  expect_error_naming(ref::dequantize_row(DType::i64, buf.data(), f.data(), 8), {"i64", "8"});
  expect_error_naming(ref::dequantize_row(DType::f8_e4m3, buf.data(), f.data(), 8), {"f8_e4m3"});
  expect_error_naming(ref::quantize_row(DType::i8, f.data(), buf.data(), 8), {"i8", "8"});
  expect_error_naming(ref::quantize_row(DType::boolean, f.data(), buf.data(), 8), {"bool"});
  EXPECT_EQ(ref::quantize_row(DType::u8, f.data(), buf.data(), 8).code(), StatusCode::unsupported);
  EXPECT_FALSE(ref::dequantize_row(static_cast<DType>(200), buf.data(), f.data(), 8).is_ok());
  EXPECT_FALSE(ref::quantize_row(static_cast<DType>(99), f.data(), buf.data(), 8).is_ok());
}

TEST(GgmlQuants, NullPointersAndEmptyRows) {
  std::vector<float> f(32);
  EXPECT_FALSE(ref::dequantize_row(DType::q8_0, nullptr, f.data(), 32).is_ok());
  EXPECT_FALSE(ref::quantize_row(DType::q8_0, f.data(), nullptr, 32).is_ok());
  EXPECT_TRUE(ref::dequantize_row(DType::q8_0, nullptr, nullptr, 0).is_ok());
  EXPECT_TRUE(ref::quantize_row(DType::q4_k, nullptr, nullptr, 0).is_ok());
}

// ---------------------------------------------------------------------------------------------
// 4. convert()

Tensor f32_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::f32, shape).value();
  const std::vector<float> x = make_data(Data::normal, t.numel(), seed);
  std::memcpy(t.data(), x.data(), x.size() * 4);
  return t;
}

std::vector<float> as_floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data(), v.size() * 4);
  return v;
}

TEST(Convert, F32ToQ8_0AndBack) {
  const Tensor x = f32_tensor({3, 5, 64}, 1);
  auto q = convert(x, DType::q8_0);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->dtype(), DType::q8_0);
  EXPECT_EQ(q->shape(), (Shape{3, 5, 64}));
  EXPECT_EQ(q->nbytes(), size_t{15 * 2 * 34});
  // Row by row the same bytes as quantize_row.
  std::vector<uint8_t> row(68);
  for (int r = 0; r < 15; ++r) {
    ASSERT_TRUE(ref::quantize_row(DType::q8_0, x.data_as<float>() + r * 64, row.data(), 64).is_ok());
    EXPECT_EQ(std::memcmp(row.data(), q->data_as<uint8_t>() + r * 68, 68), 0) << "row " << r;
  }
  auto back = convert(*q, DType::f32);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->shape(), x.shape());
  const auto xv = as_floats(x), bv = as_floats(*back);
  EXPECT_LT(rms_err(bv, xv) / rms(xv), 0.01);
}

TEST(Convert, BlockTypeToF16AndBf16) {
  const Tensor x = f32_tensor({4, 512}, 2);
  auto q = convert(x, DType::q4_k);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  auto h = convert(*q, DType::f16);
  auto bf = convert(*q, DType::bf16);
  auto f = convert(*q, DType::f32);
  ASSERT_TRUE(h.is_ok() && bf.is_ok() && f.is_ok());
  EXPECT_EQ(h->shape(), (Shape{4, 512}));
  EXPECT_EQ(h->dtype(), DType::f16);
  std::vector<float> want(2048);
  ASSERT_TRUE(ref::dequantize_row(DType::q4_k, q->data(), want.data(), 2048).is_ok());
  const auto fv = as_floats(*f);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(bits(fv[i]), bits(want[i])) << i;
    ASSERT_EQ(h->data_as<uint16_t>()[i], f32_to_f16(want[i])) << i;
    ASSERT_EQ(bf->data_as<uint16_t>()[i], f32_to_bf16(want[i])) << i;
  }
}

TEST(Convert, AnyToAnyThroughF32) {
  const Tensor x = f32_tensor({2, 256}, 3);
  auto h = convert(x, DType::f16);
  ASSERT_TRUE(h.is_ok());
  auto q = convert(*h, DType::q8_0);  // f16 -> q8_0
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  auto q2 = convert(*q, DType::q6_k);  // q8_0 -> q6_k
  ASSERT_TRUE(q2.is_ok()) << q2.status().to_string();
  auto back = convert(*q2, DType::f32);
  ASSERT_TRUE(back.is_ok());
  EXPECT_LT(rms_err(as_floats(*back), as_floats(x)) / rms(as_floats(x)), 0.05);
}

TEST(Convert, ManyRowsInParallelMatchSerial) {
  const Tensor x = f32_tensor({257, 96}, 4);
  auto q = convert(x, DType::q4_0);
  ASSERT_TRUE(q.is_ok());
  std::vector<uint8_t> want(static_cast<size_t>(elems_to_bytes(DType::q4_0, 257 * 96)));
  ASSERT_TRUE(ref::quantize_row(DType::q4_0, x.data_as<float>(), want.data(), 257 * 96).is_ok());
  EXPECT_EQ(std::memcmp(q->data(), want.data(), want.size()), 0);
}

TEST(Convert, SameDtypeCopiesAndViewsKeepTheirOffset) {
  const Tensor x = f32_tensor({6, 32}, 5);
  auto c = convert(x, DType::f32);
  ASSERT_TRUE(c.is_ok());
  EXPECT_NE(c->data(), x.data());
  EXPECT_EQ(as_floats(*c), as_floats(x));
  auto rows = x.slice_rows(2, 5);  // a view at a byte offset
  ASSERT_TRUE(rows.is_ok());
  auto h = convert(*rows, DType::f16);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->shape(), (Shape{3, 32}));
  for (int i = 0; i < 3 * 32; ++i)
    EXPECT_EQ(h->data_as<uint16_t>()[i], f32_to_f16(x.data_as<float>()[2 * 32 + i]));
}

TEST(Convert, ScalarsAndEmptyTensors) {
  Tensor s = Tensor::empty(DType::f32, {}).value();
  *s.data_as<float>() = 1.5f;
  auto h = convert(s, DType::bf16);
  ASSERT_TRUE(h.is_ok()) << h.status().to_string();
  EXPECT_EQ(h->ndim(), 0);
  EXPECT_EQ(*h->data_as<uint16_t>(), f32_to_bf16(1.5f));
  expect_error_naming(convert(s, DType::q8_0).status(), {"q8_0"});

  Tensor e = Tensor::empty(DType::f32, {0, 64}).value();
  auto q = convert(e, DType::q4_0);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->numel(), 0);
}

TEST(Convert, Errors) {
  const Tensor x = f32_tensor({4, 40}, 6);
  auto bad_shape = convert(x, DType::q8_0);
  expect_error_naming(bad_shape.status(), {"q8_0", "40"});
  auto bad_k = convert(f32_tensor({2, 128}, 7), DType::q4_k);
  expect_error_naming(bad_k.status(), {"q4_k", "128"});
  expect_error_naming(convert(Tensor(), DType::f16).status(), {"undefined"});
  expect_error_naming(convert(x, DType::i8).status(), {"i8"});
  Tensor i64 = Tensor::empty(DType::i64, {4}).value();
  expect_error_naming(convert(i64, DType::f32).status(), {"i64"});
  // Non-contiguous host tensors cannot be made through the public Tensor API yet (no strided views),
  // so that branch of convert() is exercised only once such views exist.
}

}  // namespace
}  // namespace lithe
