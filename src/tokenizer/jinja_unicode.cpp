#include "tokenizer/jinja_unicode.h"

#include "tokenizer/unicode.h"

namespace lithe::jinja {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF, like Python's strict decoder.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)) {
      ok = false;
    }
    if (!ok) {
      out.push_back(0xDC00 + b0);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // an escaped invalid byte goes back out as itself
    out.push_back(static_cast<char>(cp - 0xDC00));
  } else {
    unicode::append_utf8(out, static_cast<uint32_t>(cp));
  }
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

size_t utf8_length(std::string_view s) { return is_ascii(s) ? s.size() : decode_utf8(s).size(); }

bool is_py_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars != nullptr ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t cp) {
    return chars != nullptr ? set.find(cp) != std::u32string::npos : is_py_space(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

namespace {

// Pairs where upper and lower case are adjacent code points (upper even or odd per range).
bool in_alternating(char32_t cp, char32_t first, char32_t last) { return cp >= first && cp <= last; }

}  // namespace

char32_t to_upper_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  if (cp == 0xB5) return 0x39C;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp == 0x131) return 'I';
  if (cp == 0x17F) return 'S';
  if ((in_alternating(cp, 0x100, 0x12F) || in_alternating(cp, 0x132, 0x137) || in_alternating(cp, 0x14A, 0x177)) &&
      (cp & 1) == 1) {
    return cp - 1;
  }
  if ((in_alternating(cp, 0x139, 0x148) || in_alternating(cp, 0x179, 0x17E)) && (cp & 1) == 0) {
    return cp - 1;
  }
  if (cp >= 0x3B1 && cp <= 0x3CB && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;  // final sigma
  if (cp == 0x3AC) return 0x386;
  if (cp >= 0x3AD && cp <= 0x3AF) return cp - 37;
  if (cp == 0x3CC) return 0x38C;
  if (cp == 0x3CD || cp == 0x3CE) return cp - 63;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  if (cp >= 0xFF41 && cp <= 0xFF5A) return cp - 32;
  return cp;
}

char32_t to_lower_cp(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp == 0x130) return 'i';  // Python gives "i̇"; the combining dot is dropped here
  if ((in_alternating(cp, 0x100, 0x12F) || in_alternating(cp, 0x132, 0x137) || in_alternating(cp, 0x14A, 0x177)) &&
      (cp & 1) == 0) {
    return cp + 1;
  }
  if ((in_alternating(cp, 0x139, 0x148) || in_alternating(cp, 0x179, 0x17E)) && (cp & 1) == 1) {
    return cp + 1;
  }
  if (cp >= 0x391 && cp <= 0x3AB && cp != 0x3A2) return cp + 32;
  if (cp == 0x386) return 0x3AC;
  if (cp >= 0x388 && cp <= 0x38A) return cp + 37;
  if (cp == 0x38C) return 0x3CC;
  if (cp == 0x38E || cp == 0x38F) return cp + 63;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  if (cp >= 0xFF21 && cp <= 0xFF3A) return cp + 32;
  return cp;
}

namespace {

bool is_cased(char32_t cp) { return to_upper_cp(cp) != cp || to_lower_cp(cp) != cp || cp == 0xDF; }

template <typename F>
std::string map_cps(std::string_view s, F f) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(f(static_cast<char32_t>(c)));
    return out;
  }
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : decode_utf8(s)) {
    if (cp == 0xDF && f(U'a') == U'A') {  // 'ß'.upper() == 'SS'
      out += "SS";
      continue;
    }
    append_utf8(out, f(cp));
  }
  return out;
}

}  // namespace

std::string py_upper(std::string_view s) { return map_cps(s, to_upper_cp); }
std::string py_lower(std::string_view s) { return map_cps(s, to_lower_cp); }

std::string py_capitalize(std::string_view s) {
  std::u32string cps = decode_utf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0 && cps[i] == 0xDF) {
      out += "Ss";
      continue;
    }
    append_utf8(out, i == 0 ? to_upper_cp(cps[i]) : to_lower_cp(cps[i]));
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t cp : decode_utf8(s)) {
    if (!prev_cased && cp == 0xDF) {
      out += "Ss";
    } else {
      append_utf8(out, prev_cased ? to_lower_cp(cp) : to_upper_cp(cp));
    }
    prev_cased = is_cased(cp);
  }
  return out;
}

}  // namespace lithe::jinja
