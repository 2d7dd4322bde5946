// UTF-8 coding and Unicode character properties for the tokenizers (internal).
// Properties come from the generated tables in unicode_data.cpp (see gen_unicode_tables.py);
// lookups are a two-stage table built once on first use (about 40 KB). The tables are Unicode
// 14.0.0 (Python 3.11's unicodedata); regenerate with tests/gen/gen_unicode_tables.py. Code points
// assigned after 14.0 count as unassigned (Cn): not letters, numbers or whitespace.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "unicode_data.h"

namespace lithe::unicode {

using unicode_data::Category;

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence that starts with `lead` (1 for ASCII and for invalid lead bytes).
inline int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes one well-formed UTF-8 sequence at s[i]. Returns its length (1..4) and sets *cp, or
// returns 0 when the bytes at i are not a well-formed sequence (overlong, surrogate, > U+10FFFF,
// truncated, stray continuation byte): the rules of the Unicode standard, table 3-7.
int decode_utf8(std::string_view s, size_t i, uint32_t* cp);

// Offset of the first byte that is not part of a well-formed sequence, or npos when all valid.
size_t find_invalid_utf8(std::string_view s);

// Replaces every maximal ill-formed subpart with U+FFFD (the W3C/Unicode "best practice").
std::string replace_invalid_utf8(std::string_view s);

// Length of the longest suffix of s that is the start of a well-formed sequence still missing
// bytes (0..3). A streaming decoder holds these bytes back until the rest arrives.
size_t incomplete_utf8_suffix(std::string_view s);

void append_utf8(std::string& out, uint32_t cp);
std::string to_utf8(uint32_t cp);

Category category(uint32_t cp);
// White_Space as used by regex \s (Oniguruma / Rust): 9..13, U+0085 and categories Zs, Zl, Zp.
bool is_whitespace(uint32_t cp);
inline bool is_letter(Category c) { return c >= Category::Lu && c <= Category::Lo; }
inline bool is_mark(Category c) { return c >= Category::Mn && c <= Category::Me; }
inline bool is_number(Category c) { return c >= Category::Nd && c <= Category::No; }
inline bool is_punctuation(Category c) { return c >= Category::Pc && c <= Category::Po; }
inline bool is_symbol(Category c) { return c >= Category::Sm && c <= Category::So; }
inline bool is_other(Category c) { return c == Category::Cn || c >= Category::Cc; }

// One code point's full lowercase (may be several code points, e.g. U+0130).
void append_lowercase(uint32_t cp, std::vector<uint32_t>& out);
// Canonical decomposition of a string (NFD): full decomposition plus canonical ordering.
std::vector<uint32_t> nfd(const std::vector<uint32_t>& cps);
uint8_t combining_class(uint32_t cp);

// Decodes a valid UTF-8 string to code points (callers validate first; invalid bytes become U+FFFD).
std::vector<uint32_t> to_code_points(std::string_view s);
std::string from_code_points(const std::vector<uint32_t>& cps);

const char* unicode_version();

}  // namespace lithe::unicode
