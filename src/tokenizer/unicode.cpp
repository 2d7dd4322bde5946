#include "unicode.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <memory>

namespace lithe::unicode {
namespace {

constexpr uint32_t kMaxCp = 0x110000;
constexpr uint8_t kWhitespaceBit = 0x80;

// Two-stage property table: stage1[cp >> 8] selects a 256-entry block of stage2.
// Each byte: category (low 5 bits) | kWhitespaceBit.
struct PropertyTable {
  std::vector<uint16_t> stage1;
  std::vector<uint8_t> stage2;

  PropertyTable() {
    std::vector<uint8_t> flat(kMaxCp, 0);
    for (size_t i = 0; i < unicode_data::kCategoryRangeCount; ++i) {
      const auto& r = unicode_data::kCategoryRanges[i];
      for (uint32_t cp = r.first; cp <= r.last; ++cp) flat[cp] = static_cast<uint8_t>(r.category);
    }
    for (uint32_t cp = 0; cp < kMaxCp; ++cp) {
      const auto c = static_cast<Category>(flat[cp]);
      if ((cp >= 9 && cp <= 13) || cp == 0x85 || c == Category::Zs || c == Category::Zl || c == Category::Zp) {
        flat[cp] |= kWhitespaceBit;
      }
    }
    std::unordered_map<std::string, uint16_t> blocks;
    stage1.resize(kMaxCp >> 8);
    for (uint32_t b = 0; b < (kMaxCp >> 8); ++b) {
      std::string block(reinterpret_cast<const char*>(flat.data()) + b * 256, 256);
      auto [it, inserted] = blocks.emplace(block, static_cast<uint16_t>(stage2.size() / 256));
      if (inserted) stage2.insert(stage2.end(), block.begin(), block.end());
      stage1[b] = it->second;
    }
  }

  uint8_t get(uint32_t cp) const {
    if (cp >= kMaxCp) return 0;
    return stage2[static_cast<size_t>(stage1[cp >> 8]) * 256 + (cp & 0xFF)];
  }
};

const PropertyTable& table() {
  static const PropertyTable t;
  return t;
}

// Allowed range of the second byte for a given lead byte (Unicode table 3-7); later bytes are 80..BF.
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}

// Needed length for a valid lead byte, 0 for bytes that can never start a sequence.
int lead_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Number of bytes at s[i] that form a valid (possibly incomplete) prefix of a sequence.
int valid_prefix(std::string_view s, size_t i, int* need) {
  const auto lead = static_cast<uint8_t>(s[i]);
  *need = lead_length(lead);
  if (*need == 0) return 0;
  int k = 1;
  while (k < *need && i + k < s.size()) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    const bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++k;
  }
  return k;
}

template <typename Table>
const unicode_data::MultiMapping* find_mapping(const Table* table, size_t n, uint32_t cp) {
  const auto* end = table + n;
  const auto* it = std::lower_bound(table, end, cp, [](const unicode_data::MultiMapping& m, uint32_t v) {
    return m.cp < v;
  });
  return (it != end && it->cp == cp) ? it : nullptr;
}

// Hangul syllable decomposition constants (Unicode chapter 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

}  // namespace

int decode_utf8(std::string_view s, size_t i, uint32_t* cp) {
  int need = 0;
  const int k = valid_prefix(s, i, &need);
  if (need == 0 || k < need) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
  switch (need) {
    case 1: *cp = p[0]; break;
    case 2: *cp = (uint32_t{p[0]} & 0x1F) << 6 | (p[1] & 0x3F); break;
    case 3: *cp = (uint32_t{p[0]} & 0x0F) << 12 | (uint32_t{p[1]} & 0x3F) << 6 | (p[2] & 0x3F); break;
    default:
      *cp = (uint32_t{p[0]} & 0x07) << 18 | (uint32_t{p[1]} & 0x3F) << 12 | (uint32_t{p[2]} & 0x3F) << 6 |
            (p[3] & 0x3F);
  }
  return need;
}

size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const int n = decode_utf8(s, i, &cp);
    if (n == 0) return i;
    i += static_cast<size_t>(n);
  }
  return std::string_view::npos;
}

std::string replace_invalid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int need = 0;
    const int k = valid_prefix(s, i, &need);
    if (need != 0 && k == need) {
      out.append(s.substr(i, static_cast<size_t>(k)));
      i += static_cast<size_t>(k);
    } else {
      append_utf8(out, kReplacementChar);
      i += static_cast<size_t>(std::max(k, 1));
    }
  }
  return out;
}

size_t incomplete_utf8_suffix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<uint8_t>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: the lead is further back
    int need = 0;
    const int k = valid_prefix(s, i, &need);
    // Incomplete when the lead is valid, every byte after it fits, and bytes are still missing.
    if (need > 1 && static_cast<size_t>(k) == back && k < need) return back;
    return 0;
  }
  return 0;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string to_utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

Category category(uint32_t cp) { return static_cast<Category>(table().get(cp) & 0x1F); }

bool is_whitespace(uint32_t cp) { return (table().get(cp) & kWhitespaceBit) != 0; }

void append_lowercase(uint32_t cp, std::vector<uint32_t>& out) {
  const auto* m = find_mapping(unicode_data::kLowercase, unicode_data::kLowercaseCount, cp);
  if (m == nullptr) {
    out.push_back(cp);
    return;
  }
  out.insert(out.end(), unicode_data::kLowercasePool + m->offset, unicode_data::kLowercasePool + m->offset + m->length);
}

uint8_t combining_class(uint32_t cp) {
  const auto* begin = unicode_data::kCombiningRanges;
  const auto* end = begin + unicode_data::kCombiningRangeCount;
  const auto* it = std::upper_bound(begin, end, cp, [](uint32_t v, const unicode_data::CombiningRange& r) {
    return v < r.first;
  });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

std::vector<uint32_t> nfd(const std::vector<uint32_t>& cps) {
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) {
    if (cp >= kSBase && cp < kSBase + kSCount) {
      const uint32_t s = cp - kSBase;
      out.push_back(kLBase + s / kNCount);
      out.push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
      continue;
    }
    const auto* m = find_mapping(unicode_data::kNfd, unicode_data::kNfdCount, cp);
    if (m == nullptr) {
      out.push_back(cp);
    } else {
      out.insert(out.end(), unicode_data::kNfdPool + m->offset, unicode_data::kNfdPool + m->offset + m->length);
    }
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return out;
}

std::vector<uint32_t> to_code_points(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const int n = decode_utf8(s, i, &cp);
    if (n == 0) {
      out.push_back(kReplacementChar);
      ++i;
    } else {
      out.push_back(cp);
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

std::string from_code_points(const std::vector<uint32_t>& cps) {
  std::string s;
  s.reserve(cps.size());
  for (uint32_t cp : cps) append_utf8(s, cp);
  return s;
}

const char* unicode_version() { return unicode_data::kUnicodeVersion; }

}  // namespace lithe::unicode
