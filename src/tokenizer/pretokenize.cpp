#include "pretokenize.h"

#include <array>

#include "unicode.h"

namespace lithe::tok {
namespace {

bool is_l(const SplitText& t, size_t i) { return (t.cls[i] & kLetter) != 0; }
bool is_n(const SplitText& t, size_t i) { return (t.cls[i] & kNumber) != 0; }
bool is_s(const SplitText& t, size_t i) { return (t.cls[i] & kSpace) != 0; }
// [^\s\p{L}\p{N}]
bool is_other(const SplitText& t, size_t i) { return t.cls[i] == 0; }
bool is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

size_t run(const SplitText& t, size_t i, size_t end, bool (*pred)(const SplitText&, size_t)) {
  size_t j = i;
  while (j < end && pred(t, j)) ++j;
  return j;
}

uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive; returns the match length or 0.
size_t contraction(const SplitText& t, size_t i, size_t end, bool ignore_case) {
  if (t.cps[i] != '\'' || i + 1 >= end) return 0;
  auto c = [&](size_t k) { return ignore_case ? lower_ascii(t.cps[k]) : t.cps[k]; };
  const uint32_t c1 = c(i + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (i + 2 < end) {
    const uint32_t c2 = c(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  }
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace code point i: the run minus its last character when a
// non-space follows (that character then prefixes the next word), the whole run at the end.
size_t trailing_space(const SplitText& t, size_t i, size_t end) {
  const size_t k = run(t, i, end, is_s);
  if (k == end) return k - i;
  return k - i >= 2 ? k - i - 1 : 1;
}

// GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const SplitText& t, size_t i, size_t end) {
  if (size_t n = contraction(t, i, end, false)) return n;
  const bool sp = t.cps[i] == ' ' && i + 1 < end;
  if (is_l(t, i)) return run(t, i, end, is_l) - i;
  if (sp && is_l(t, i + 1)) return run(t, i + 1, end, is_l) - i;
  if (is_n(t, i)) return run(t, i, end, is_n) - i;
  if (sp && is_n(t, i + 1)) return run(t, i + 1, end, is_n) - i;
  if (is_other(t, i)) return run(t, i, end, is_other) - i;
  if (sp && is_other(t, i + 1)) return run(t, i + 1, end, is_other) - i;
  return trailing_space(t, i, end);  // i is whitespace here
}

// Llama-3 / Qwen2 family; max_digits 3 for Llama-3, 1 for Qwen2:
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
template <size_t kMaxDigits>
size_t match_llama3(const SplitText& t, size_t i, size_t end) {
  if (size_t n = contraction(t, i, end, true)) return n;
  const uint32_t c = t.cps[i];
  if (is_l(t, i)) return run(t, i, end, is_l) - i;
  if (!is_crlf(c) && !is_n(t, i) && i + 1 < end && is_l(t, i + 1)) return run(t, i + 1, end, is_l) - i;
  if (is_n(t, i)) {
    size_t j = i;
    while (j < end && j - i < kMaxDigits && is_n(t, j)) ++j;
    return j - i;
  }
  size_t s = i;
  if (c == ' ' && i + 1 < end && is_other(t, i + 1)) s = i + 1;
  if (is_other(t, s)) {
    size_t k = run(t, s, end, is_other);
    while (k < end && is_crlf(t.cps[k])) ++k;
    return k - i;
  }
  // i is whitespace here. \s*[\r\n]+: up to the last CR/LF of the whitespace run.
  const size_t k = run(t, i, end, is_s);
  for (size_t p = k; p > i; --p) {
    if (is_crlf(t.cps[p - 1])) return p - i;
  }
  return trailing_space(t, i, end);
}

size_t match_digit(const SplitText& t, size_t i, size_t /*end*/) { return is_n(t, i) ? 1 : 0; }
size_t match_digits(const SplitText& t, size_t i, size_t end) { return run(t, i, end, is_n) - i; }

const char* const kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Preset {
  const char* name;
  std::vector<const char*> regexes;
};

// GGUF tokenizer.ggml.pre names (as llama.cpp's converter writes them) -> split rules.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"gpt-2", {kGpt2Regex}},
      {"gpt2", {kGpt2Regex}},
      {"default", {kGpt2Regex}},
      {"olmo", {kGpt2Regex}},
      {"llama-bpe", {kLlama3Regex}},
      {"llama3", {kLlama3Regex}},
      {"llama-v3", {kLlama3Regex}},
      {"dbrx", {kLlama3Regex}},
      {"smaug-bpe", {kLlama3Regex}},
      {"qwen2", {kQwen2Regex}},
      {"stablelm2", {kQwen2Regex}},
      {"starcoder", {R"(\p{N})", kGpt2Regex}},
      {"smollm", {R"(\p{N})", kGpt2Regex}},
      {"refact", {R"(\p{N})", kGpt2Regex}},
      {"command-r", {R"(\p{N})", kGpt2Regex}},
      {"codeshell", {R"(\p{N})", kGpt2Regex}},
  };
  return p;
}

uint8_t classify(uint32_t cp) {
  if (unicode::is_whitespace(cp)) return kSpace;
  const auto c = unicode::category(cp);
  if (unicode::is_letter(c)) return kLetter;
  if (unicode::is_number(c)) return kNumber;
  return 0;
}

const std::array<uint8_t, 128>& ascii_classes() {
  static const std::array<uint8_t, 128> t = [] {
    std::array<uint8_t, 128> a{};
    for (uint32_t c = 0; c < 128; ++c) a[c] = classify(c);
    return a;
  }();
  return t;
}

}  // namespace

const std::vector<SplitRule>& split_rules() {
  static const std::vector<SplitRule> rules = {
      {kGpt2Regex, match_gpt2},
      {kLlama3Regex, match_llama3<3>},
      {kQwen2Regex, match_llama3<1>},
      {R"(\p{N})", match_digit},
      {R"(\p{N}+)", match_digits},
  };
  return rules;
}

const SplitRule* find_split_rule(std::string_view regex) {
  for (const auto& r : split_rules()) {
    if (regex == r.regex) return &r;
  }
  return nullptr;
}

Result<std::vector<const SplitRule*>> pretokenizer_preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (name != p.name) continue;
    std::vector<const SplitRule*> rules;
    for (const char* re : p.regexes) {
      const SplitRule* r = find_split_rule(re);
      LITHE_CHECK(r != nullptr);
      rules.push_back(r);
    }
    return rules;
  }
  std::string known;
  for (const auto& p : presets()) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return error(StatusCode::unsupported, "pre-tokenizer '{}' is not implemented (known: {})", name, known);
}

std::string preset_name_for(const std::vector<const SplitRule*>& rules) {
  for (const auto& p : presets()) {
    if (p.regexes.size() != rules.size()) continue;
    bool same = true;
    for (size_t i = 0; i < rules.size(); ++i) same = same && std::string_view(p.regexes[i]) == rules[i]->regex;
    if (same) return p.name;
  }
  return {};
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

void PreTokenizer::split(std::string_view text, Scratch& s,
                         std::vector<std::pair<uint32_t, uint32_t>>& words) const {
  words.clear();
  if (text.empty()) return;
  if (rules_.empty()) {
    words.emplace_back(0, static_cast<uint32_t>(text.size()));
    return;
  }
  s.cps.clear();
  s.cls.clear();
  s.offsets.clear();
  const auto& ascii = ascii_classes();
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<uint8_t>(text[i]);
    s.offsets.push_back(static_cast<uint32_t>(i));
    if (b < 0x80) {
      s.cps.push_back(b);
      s.cls.push_back(ascii[b]);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    int n = unicode::decode_utf8(text, i, &cp);
    if (n == 0) {  // callers pass valid UTF-8; stay safe anyway
      cp = unicode::kReplacementChar;
      n = 1;
    }
    s.cps.push_back(cp);
    s.cls.push_back(classify(cp));
    i += static_cast<size_t>(n);
  }
  s.offsets.push_back(static_cast<uint32_t>(text.size()));
  const size_t n = s.cps.size();
  const SplitText t{s.cps.data(), s.cls.data()};

  // Boundaries: fragment j is [a[j], a[j+1]).
  s.a.assign({0, static_cast<uint32_t>(n)});
  for (const SplitRule* rule : rules_) {
    s.b.clear();
    s.b.push_back(0);
    for (size_t j = 0; j + 1 < s.a.size(); ++j) {
      const size_t begin = s.a[j], end = s.a[j + 1];
      size_t gap = begin, k = begin;
      while (k < end) {
        const size_t m = rule->match(t, k, end);
        if (m == 0) {
          ++k;
          continue;
        }
        if (gap < k) s.b.push_back(static_cast<uint32_t>(k));
        k += m;
        s.b.push_back(static_cast<uint32_t>(k));
        gap = k;
      }
      if (gap < end) s.b.push_back(static_cast<uint32_t>(end));
    }
    s.a.swap(s.b);
  }
  for (size_t j = 0; j + 1 < s.a.size(); ++j) words.emplace_back(s.offsets[s.a[j]], s.offsets[s.a[j + 1]]);
}

}  // namespace lithe::tok
