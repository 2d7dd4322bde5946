#include "lithe/core/dtype.h"

#include <array>
#include <cctype>

namespace lithe {
namespace {

// Indexed by DType. Block sizes and byte counts match ggml's type traits.
constexpr std::array<DTypeTraits, kNumDTypes> kTraits = {{
    {"f32", 1, 4, true, false},
    {"f16", 1, 2, true, false},
    {"bf16", 1, 2, true, false},
    {"f64", 1, 8, true, false},
    {"i8", 1, 1, false, false},
    {"i16", 1, 2, false, false},
    {"i32", 1, 4, false, false},
    {"i64", 1, 8, false, false},
    {"u8", 1, 1, false, false},
    {"bool", 1, 1, false, false},
    {"f8_e4m3", 1, 1, true, false},
    {"f8_e5m2", 1, 1, true, false},
    {"q4_0", 32, 18, false, true},    // f16 d; 16 B nibbles
    {"q4_1", 32, 20, false, true},    // f16 d, m; 16 B nibbles
    {"q5_0", 32, 22, false, true},    // f16 d; 4 B high bits; 16 B nibbles
    {"q5_1", 32, 24, false, true},    // f16 d, m; 4 B high bits; 16 B nibbles
    {"q8_0", 32, 34, false, true},    // f16 d; 32 i8
    {"q8_1", 32, 36, false, true},    // f16 d, s; 32 i8
    {"q2_k", 256, 84, false, true},   // 16 B scales; 64 B quants; f16 d, dmin
    {"q3_k", 256, 110, false, true},  // 32 B hmask; 64 B quants; 12 B scales; f16 d
    {"q4_k", 256, 144, false, true},  // f16 d, dmin; 12 B scales; 128 B quants
    {"q5_k", 256, 176, false, true},  // f16 d, dmin; 12 B scales; 32 B qh; 128 B qs
    {"q6_k", 256, 210, false, true},  // 128 B ql; 64 B qh; 16 i8 scales; f16 d
    {"q8_k", 256, 292, false, true},  // f32 d; 256 i8; 16 i16 bsums
    {"gq", 1, 0, false, true},        // sizes in the tensor's PackedWeight (core/packed.h)
}};

}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTraits[static_cast<size_t>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    std::string_view n = kTraits[i].name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t j = 0; j < n.size() && eq; ++j)
      eq = std::tolower(static_cast<unsigned char>(name[j])) == n[j];
    if (eq) return static_cast<DType>(i);
  }
  return std::nullopt;
}

Result<int64_t> row_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  if (n < 0 || n % tr.block_elems != 0)
    return error(StatusCode::invalid_argument,
                 "row of {} elements is not a multiple of the {} block size {}", n, tr.name,
                 tr.block_elems);
  return n / tr.block_elems * tr.block_bytes;
}

int64_t elems_to_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  LITHE_CHECK_MSG(n % tr.block_elems == 0, "{} elements of {}", n, tr.name);
  return n / tr.block_elems * tr.block_bytes;
}

}  // namespace lithe
