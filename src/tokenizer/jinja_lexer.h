// Jinja lexer: template source -> tokens, with jinja2's whitespace control as HF transformers
// configures it (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//   {%- / -%} (and {{- -}} {#- -#}) strip all whitespace before / after the tag;
//   trim_blocks drops the first newline after a block or comment tag;
//   lstrip_blocks drops spaces and tabs from the start of a line up to a block or comment tag;
//   {%+ / +%} turn those two off for one tag; {% raw %} ... {% endraw %} is copied verbatim.
// Comments disappear here; the parser sees text, tag delimiters and expression tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/core/status.h"
#include "tokenizer/jinja_value.h"

namespace lithe::jinja {

enum class Tok : uint8_t {
  text,         // literal template data (value in text)
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,         // identifier or keyword (text)
  string,       // string literal, unescaped (text)
  integer,      // ival
  floating,     // fval
  op,           // operator or punctuation (text): + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  eof,
};

struct Token {
  Tok kind = Tok::eof;
  std::string text;
  int64_t ival = 0;
  double fval = 0.0;
  SrcPos pos;
};

// Normalizes newlines (\r\n, \r -> \n) and drops one trailing newline, as jinja2 does.
std::string normalize_source(std::string_view source);

// Tokenizes a normalized source. Errors name the line and column.
Result<std::vector<Token>> lex(std::string_view source);

std::string describe(const Token& t);  // for error messages: "'endfor'", "end of template", ...

}  // namespace lithe::jinja
