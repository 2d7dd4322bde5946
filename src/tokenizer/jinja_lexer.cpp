#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja_unicode.h"

namespace lithe::jinja {

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::text: return "template data";
    case Tok::var_begin: return "'{{'";
    case Tok::var_end: return "end of print statement";
    case Tok::block_begin: return "'{%'";
    case Tok::block_end: return "end of statement block";
    case Tok::name:
    case Tok::op: return "'" + t.text + "'";
    case Tok::string: return "string literal";
    case Tok::integer:
    case Tok::floating: return "number";
    case Tok::eof: return "end of template";
  }
  return "token";
}

namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src.size(); ++i) {
      if (src[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;  // jinja2: did the previous match end with a newline?
    while (pos < src_.size()) {
      const size_t i = find_tag(pos);
      if (i == std::string_view::npos) {
        emit_text(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[i + 1];
      const char sign = i + 2 < src_.size() && (src_[i + 2] == '-' || src_[i + 2] == '+') ? src_[i + 2] : 0;
      const size_t after = i + 2 + (sign != 0 ? 1 : 0);
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(after, &raw_end);
      emit_text(pos, strip_before(src_.substr(pos, i - pos), sign, kind != '{', line_starting));
      if (raw) {
        LITHE_ASSIGN(pos, lex_raw(i, raw_end));
      } else if (kind == '#') {
        LITHE_ASSIGN(pos, skip_comment(i, after));
      } else {
        LITHE_ASSIGN(pos, lex_tag(i, after, kind == '%'));
      }
      line_starting = src_[pos - 1] == '\n';
    }
    Token eof;
    eof.kind = Tok::eof;
    eof.pos = pos_of(src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  // Line and column (in code points) of a byte offset. Tokens come in order, so the column is
  // counted on from the previous position: linear in the template, even on one long line.
  SrcPos pos_of(size_t off) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - 1;
    const size_t ls = *it;
    if (off < col_off_ || col_off_ < ls) {
      col_off_ = ls;
      col_ = 1;
    }
    for (; col_off_ < off; ++col_off_) {
      if ((static_cast<unsigned char>(src_[col_off_]) & 0xC0) != 0x80) ++col_;
    }
    return SrcPos{static_cast<int>(it - line_starts_.begin()) + 1, col_};
  }

  Status syntax(size_t off, const std::string& msg) const {
    const SrcPos p = pos_of(off);
    return error(StatusCode::invalid_argument, "chat template syntax error at line {}, column {}: {}", p.line, p.col,
                 msg);
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  // Python whitespace (re's \s) at off: its length in bytes, or 0.
  size_t space_at(size_t off) const {
    const auto c = static_cast<unsigned char>(src_[off]);
    if (c < 0x80) return is_py_space(c) ? 1 : 0;
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (off + len > src_.size()) return 0;
    const std::u32string cp = decode_utf8(src_.substr(off, len));
    return cp.size() == 1 && is_py_space(cp[0]) ? len : 0;
  }
  size_t skip_space(size_t off) const {
    while (off < src_.size()) {
      const size_t n = space_at(off);
      if (n == 0) break;
      off += n;
    }
    return off;
  }
  bool starts(size_t off, std::string_view s) const { return src_.substr(off, s.size()) == s; }

  // Whitespace control for the data in front of a tag: "-" strips it all; otherwise, for block
  // and comment tags, lstrip_blocks removes the spaces between the line start and the tag.
  std::string_view strip_before(std::string_view text, char sign, bool lstrip_kind, bool line_starting) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0) {
        size_t b = e - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        const std::u32string cp = decode_utf8(text.substr(b, e - b));
        if (cp.size() != 1 || !is_py_space(cp[0])) break;
        e = b;
      }
      return text.substr(0, e);
    }
    if (sign == '+' || !lstrip_kind) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos == 0 && !line_starting) || l_pos == text.size()) return text;
    const size_t base = static_cast<size_t>(text.data() - src_.data());
    return skip_space(base + l_pos) == base + text.size() ? text.substr(0, l_pos) : text;
  }

  void emit_text(size_t off, std::string_view text) {
    if (text.empty()) return;
    Token t;
    t.kind = Tok::text;
    t.text = std::string(text);
    t.pos = pos_of(off);
    tokens_.push_back(std::move(t));
  }

  // {%[-+]? raw \s* (-%}\s* | %}) -- no trim_blocks here, as in jinja2's root_raw_re.
  bool match_raw_begin(size_t off, size_t* end) const {
    off = skip_space(off);
    if (!starts(off, "raw")) return false;
    off = skip_space(off + 3);
    if (starts(off, "-%}")) {
      *end = skip_space(off + 3);
      return true;
    }
    if (starts(off, "%}")) {
      *end = off + 2;
      return true;
    }
    return false;
  }

  // The end of a block or comment tag; off is at its sign (- or +) or, without one, at the
  // delimiter. Returns the offset after the tag and the whitespace it consumes.
  size_t close_block(size_t off, char sign, size_t delim_len) const {
    off += delim_len + (sign != 0 ? 1 : 0);
    if (sign == '-') return skip_space(off);
    if (sign == 0 && off < src_.size() && src_[off] == '\n') return off + 1;  // trim_blocks
    return off;
  }

  Result<size_t> lex_raw(size_t start, size_t pos) {
    if (pos >= src_.size()) return pos;  // jinja2 quirk: an unclosed raw at the very end is empty
    for (size_t j = src_.find("{%", pos); j != std::string_view::npos; j = src_.find("{%", j + 1)) {
      const char sign = j + 2 < src_.size() && (src_[j + 2] == '-' || src_[j + 2] == '+') ? src_[j + 2] : 0;
      size_t k = skip_space(j + 2 + (sign != 0 ? 1 : 0));
      if (!starts(k, "endraw")) continue;
      k = skip_space(k + 6);
      char end_sign = 0;
      if (starts(k, "-%}") || starts(k, "+%}")) end_sign = src_[k];
      if (end_sign == 0 && !starts(k, "%}")) continue;
      const bool line_starting = src_[pos - 1] == '\n';
      emit_text(pos, strip_before(src_.substr(pos, j - pos), sign, true, line_starting));
      return close_block(k, end_sign, 2);
    }
    return syntax(start, "missing end of raw directive ({% endraw %})");
  }

  Result<size_t> skip_comment(size_t start, size_t pos) {
    if (pos >= src_.size()) return pos;  // jinja2 quirk: "{#" at the very end is dropped
    for (size_t j = pos; j + 1 < src_.size(); ++j) {
      if ((src_[j] == '-' || src_[j] == '+') && starts(j + 1, "#}")) return close_block(j, src_[j], 2);
      if (starts(j, "#}")) return close_block(j, 0, 2);
    }
    return syntax(start, "missing end of comment tag '#}'");
  }

  void push(Tok kind, size_t off, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = pos_of(off);
    tokens_.push_back(std::move(t));
  }

  Result<size_t> lex_tag(size_t start, size_t pos, bool block) {
    push(block ? Tok::block_begin : Tok::var_begin, start);
    std::string balance;  // expected closing brackets, innermost last
    while (true) {
      if (pos >= src_.size()) {
        return syntax(
            start, fmt::format("unexpected end of template: tag '{}' opened here is not closed", block ? "{%" : "{{"));
      }
      if (balance.empty()) {
        const std::string_view close = block ? "%}" : "}}";
        const char c = src_[pos];
        if ((c == '-' || (c == '+' && block)) && starts(pos + 1, close)) {
          push(block ? Tok::block_end : Tok::var_end, pos);
          return block ? close_block(pos, c, 2) : skip_space(pos + 3);
        }
        if (starts(pos, close)) {
          push(block ? Tok::block_end : Tok::var_end, pos);
          return block ? close_block(pos, 0, 2) : pos + 2;
        }
      }
      const size_t ws = space_at(pos);
      if (ws > 0) {
        pos += ws;
        continue;
      }
      const char c = src_[pos];
      if (c >= '0' && c <= '9') {
        LITHE_ASSIGN(pos, lex_number(pos));
      } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t e = pos;
        while (e < src_.size() && (src_[e] == '_' || std::isalnum(static_cast<unsigned char>(src_[e])))) ++e;
        push(Tok::name, pos, std::string(src_.substr(pos, e - pos)));
        pos = e;
      } else if (c == '\'' || c == '"') {
        LITHE_ASSIGN(pos, lex_string(pos));
      } else {
        LITHE_ASSIGN(pos, lex_operator(pos, balance));
      }
    }
  }

  Result<size_t> lex_operator(size_t pos, std::string& balance) {
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (starts(pos, op)) {
        push(Tok::op, pos, std::string(op));
        return pos + 2;
      }
    }
    const char c = src_[pos];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      return syntax(
          pos, fmt::format("unexpected character '{}'", encode_utf8(decode_utf8(src_.substr(pos, 4)).substr(0, 1))));
    }
    if (c == '(' || c == '[' || c == '{') balance += c == '(' ? ')' : c == '[' ? ']' : '}';
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return syntax(pos, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) return syntax(pos, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(Tok::op, pos, std::string(1, c));
    return pos + 1;
  }

  size_t digits(size_t pos) const {  // digits with single underscores between them
    while (pos < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[pos])) ||
            (src_[pos] == '_' && pos + 1 < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos + 1]))))) {
      ++pos;
    }
    return pos;
  }

  Result<size_t> lex_number(size_t pos) {
    size_t e = digits(pos);
    bool is_float = false;
    // jinja2's float_re has (?<!\.): after a dot (foo.0.1) numbers are integers (item access).
    const bool after_dot = pos > 0 && src_[pos - 1] == '.';
    if (!after_dot) {
      if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
        e = digits(e + 1);
        is_float = true;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t k = e + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
          e = digits(k);
          is_float = true;
        }
      }
    }
    std::string text(src_.substr(pos, e - pos));
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t;
    t.pos = pos_of(pos);
    t.text = text;
    if (is_float) {
      t.kind = Tok::floating;
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = Tok::integer;
      errno = 0;
      t.ival = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        return error(StatusCode::unsupported,
                     "chat template uses unsupported Jinja construct 'integer literal {} (beyond 64 bits)' at line {}",
                     text, t.pos.line);
      }
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  Result<size_t> lex_string(size_t pos) {
    const char quote = src_[pos];
    size_t e = pos + 1;
    while (e < src_.size() && src_[e] != quote) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) return syntax(pos, "unterminated string literal");
    LITHE_ASSIGN(std::string value, unescape(pos + 1, e));
    push(Tok::string, pos, std::move(value));
    return e + 1;
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  Result<std::string> unescape(size_t b, size_t e) const {
    std::string out;
    auto hex = [&](size_t at, int n, char32_t* cp) {
      if (at + static_cast<size_t>(n) > e) return false;
      *cp = 0;
      for (int k = 0; k < n; ++k) {
        const char h = src_[at + static_cast<size_t>(k)];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
        *cp = *cp * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      return true;
    };
    for (size_t i = b; i < e; ++i) {
      if (src_[i] != '\\') {
        out += src_[i];
        continue;
      }
      const char c = src_[++i];
      switch (c) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          char32_t cp = 0;
          if (!hex(i + 1, n, &cp)) return syntax(i - 1, fmt::format("truncated \\{} escape in string literal", c));
          if (cp > 0x10FFFF) return syntax(i - 1, "illegal Unicode character in string literal");
          append_utf8(out, cp);
          i += static_cast<size_t>(n);
          break;
        }
        case 'N':
          return error(StatusCode::unsupported,
                       "chat template uses unsupported Jinja construct '\\N{{...}} escape' at line {}", pos_of(i).line);
        default:
          if (c >= '0' && c <= '7') {
            char32_t cp = 0;
            int n = 0;
            while (n < 3 && i < e && src_[i] >= '0' && src_[i] <= '7') {
              cp = cp * 8 + static_cast<char32_t>(src_[i] - '0');
              ++i;
              ++n;
            }
            --i;
            append_utf8(out, cp);
          } else {  // unknown escapes stay as written
            out += '\\';
            out += c;
          }
      }
    }
    return out;
  }

  std::string_view src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  mutable size_t col_off_ = 0;  // pos_of's cache: the column at byte offset col_off_
  mutable int col_ = 1;
};

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace lithe::jinja
