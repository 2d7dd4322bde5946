// UTF-8 and Python-string helpers for the Jinja interpreter: templates index, slice, strip and
// case-map strings by code point exactly as Python's str does, so that renders match jinja2.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lithe::jinja {

// Decodes UTF-8 into code points. An invalid byte b becomes U+DC00+b (Python's surrogateescape)
// so that encode_utf8(decode_utf8(s)) == s for every byte string.
std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view cps);
void append_utf8(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);  // code points, as Python's len(str)
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point (also what re's \s matches).
bool is_py_space(char32_t cp);

// str.strip/lstrip/rstrip: without chars, Unicode whitespace; with chars, any of chars' code points.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);

// Case mapping. Covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic and fullwidth Latin;
// other code points are left as they are (see chat_template.h for the list of limits).
char32_t to_upper_cp(char32_t cp);
char32_t to_lower_cp(char32_t cp);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_title(std::string_view s);       // str.title()

}  // namespace lithe::jinja
