// Tests of include/lithe/core/half.h against references written differently: value-based (exact
// doubles) rather than bit manipulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lithe/core/half.h"

namespace lithe {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value of an f16 bit pattern, computed from the definition (exact in double).
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant == 0 ? INFINITY : NAN;
  } else {
    v = std::ldexp(static_cast<double>(1024 + mant), exp - 25);
  }
  return sign ? -v : v;
}

bool is_f16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

TEST(Half, F16ToF32AllPatterns) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = f16_to_f32(h);
    if (is_f16_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(bits(f) >> 31, i >> 15) << "nan sign " << std::hex << i;
      ASSERT_EQ((bits(f) >> 13) & 0x3ff, i & 0x3ff) << "nan payload " << std::hex << i;
      continue;
    }
    const double want = f16_value(h);
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << i;
    ASSERT_EQ(std::signbit(f), (i >> 15) != 0) << std::hex << i;  // -0 stays -0
  }
}

TEST(Half, F16RoundTripAllPatterns) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t back = f32_to_f16(f16_to_f32(h));
    if (is_f16_nan(h)) {
      EXPECT_TRUE(is_f16_nan(back)) << std::hex << i;  // a (quiet) nan of the same sign
      EXPECT_EQ(back & 0x8000, h & 0x8000) << std::hex << i;
      EXPECT_NE(back & 0x200, 0) << "quiet bit " << std::hex << i;
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
}

// Careful reference for f32 -> f16: nearest representable value by exact comparison in double over
// the sorted list of all finite non-negative f16 values, ties to the even bit pattern; a value at
// or beyond the midpoint between 65504 and 65536 (= the next "value", 2^16, that is inf) overflows.
class F16Reference {
 public:
  F16Reference() {
    for (uint32_t h = 0; h <= 0x7c00; ++h) vals_.push_back(h == 0x7c00 ? 65536.0 : f16_value(static_cast<uint16_t>(h)));
  }
  uint16_t operator()(float f) const {
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (std::isnan(f)) return 0x7e00 | sign;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65536.0) return 0x7c00 | sign;
    const auto it = std::upper_bound(vals_.begin(), vals_.end(), a);  // first value > a
    const auto hi = static_cast<uint16_t>(it - vals_.begin());
    const auto lo = static_cast<uint16_t>(hi - 1);  // vals_[lo] <= a < vals_[hi]
    const double dlo = a - vals_[lo], dhi = vals_[hi] - a;
    uint16_t r;
    if (dlo < dhi) {
      r = lo;
    } else if (dhi < dlo) {
      r = hi;
    } else {
      r = (lo & 1) ? hi : lo;
    }
    return r | sign;
  }

 private:
  std::vector<double> vals_;
};

TEST(Half, F32ToF16TiesSubnormalsOverflow) {
  const F16Reference ref;
  int checked = 0;
  auto check = [&](float f) {
    ++checked;
    ASSERT_EQ(f32_to_f16(f), ref(f)) << "f32 " << f << " bits 0x" << std::hex << bits(f);
    ASSERT_EQ(f32_to_f16(-f), ref(-f)) << "f32 " << -f << " bits 0x" << std::hex << bits(-f);
  };
  // Every f16 value, every midpoint between neighbours (an exact tie in f32), and the f32
  // neighbours of each: covers ties-to-even in normals and subnormals, carries into the next
  // binade, the subnormal/normal boundary and the overflow threshold (65520).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double v = f16_value(static_cast<uint16_t>(h));
    const double next = h + 1 == 0x7c00 ? 65536.0 : f16_value(static_cast<uint16_t>(h + 1));
    const auto mid = static_cast<float>((v + next) / 2);  // exact: f32 has more bits than f16
    ASSERT_EQ(static_cast<double>(mid), (v + next) / 2);
    for (float f : {static_cast<float>(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                    std::nextafter(static_cast<float>(v), INFINITY)})
      check(f);
  }
  // Below the smallest subnormal: 2^-25 is the tie with 0.
  for (float f : {0.0f, std::ldexp(1.0f, -25), std::nextafter(std::ldexp(1.0f, -25), 1.0f),
                  std::nextafter(std::ldexp(1.0f, -25), 0.0f), std::ldexp(1.0f, -30), std::ldexp(1.0f, -126),
                  std::ldexp(1.0f, -149), 1e-45f, 65504.0f, 65519.996f, 65520.0f, 70000.0f, 1e10f, 3.4e38f,
                  INFINITY})
    check(f);
  // Random f32 bit patterns over the whole range and densely around the f16 range.
  std::mt19937 rng(42);
  for (int i = 0; i < 300000; ++i) {
    float f = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    check(f);
    f = from_bits((static_cast<uint32_t>(rng()) & 0x1fffffffu) + 0x30000000u);  // 2^-31 .. 2^32
    check(f);
  }
  // NaN stays a quiet NaN with its sign.
  for (uint32_t nb : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fbfffffu}) {
    const uint16_t h = f32_to_f16(from_bits(nb));
    EXPECT_TRUE(is_f16_nan(h)) << std::hex << nb;
    EXPECT_EQ(h & 0x8000, (nb >> 16) & 0x8000) << std::hex << nb;
  }
  EXPECT_GT(checked, 300000);
}

// Reference bf16 rounding: nearest of the two bf16 neighbours by exact comparison in double,
// ties to even; the neighbour above the largest finite bf16 is inf (at the value 2^128).
uint16_t bf16_reference(float f) {
  const uint32_t x = bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  const auto lo = static_cast<uint16_t>(x >> 16);
  if ((x & 0xffffu) == 0) return lo;
  const auto hi = static_cast<uint16_t>(lo + 1);  // next magnitude up (same sign)
  auto value = [](uint16_t b) {
    if ((b & 0x7fff) == 0x7f80) return std::ldexp(1.0, 128);  // inf, for the distance
    return std::fabs(static_cast<double>(bf16_to_f32(b)));
  };
  const double a = std::fabs(static_cast<double>(f));
  const double dlo = a - value(lo), dhi = value(hi) - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1) ? hi : lo;
}

TEST(Half, Bf16Rounding) {
  auto check = [](uint32_t x) {
    const float f = from_bits(x);
    ASSERT_EQ(f32_to_bf16(f), bf16_reference(f)) << "f32 bits 0x" << std::hex << x;
  };
  // Every high half with the low halves that decide rounding: exact, just below/at/above the tie.
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    if ((hi & 0x7f80) == 0x7f80) continue;  // inf/nan exponents: below
    for (uint32_t low : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) check(hi << 16 | low);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const auto x = static_cast<uint32_t>(rng());
    if (std::isnan(from_bits(x))) continue;
    check(x);
  }
  // Overflow to inf, inf, NaN (quiet, sign kept), and bf16 -> f32 -> bf16 for all patterns.
  EXPECT_EQ(f32_to_bf16(3.4028235e38f), 0x7f80);  // rounds up past the largest finite bf16
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  for (uint32_t nb : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = f32_to_bf16(from_bits(nb));
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << nb;
    EXPECT_NE(h & 0x40, 0) << std::hex << nb;
    EXPECT_EQ(h & 0x8000, (nb >> 16) & 0x8000) << std::hex << nb;
  }
  for (uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float f = bf16_to_f32(h);
    EXPECT_EQ(bits(f), i << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), h) << std::hex << i;
    } else {
      ASSERT_EQ(f32_to_bf16(f), h | 0x40) << std::hex << i;
    }
  }
}

}  // namespace
}  // namespace lithe
