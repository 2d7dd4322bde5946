// WordPiece (BERT), with Hugging Face's BertNormalizer and BertPreTokenizer:
//   normalize: drop NUL, U+FFFD and Cc/Cf/Co/Cs characters except \t\n\r, map whitespace
//              to ' ', surround CJK ideographs with spaces, strip accents (NFD, drop Mn), lowercase;
//   split:     on whitespace (removed) and punctuation (each mark its own word);
//   model:     greedy longest-match-first; pieces after the first carry the "##" prefix; a word
//              with an unmatchable rest, or longer than max_input_chars_per_word, is one unk.
#include "tokenizer_impl.h"
#include "unicode.h"

namespace lithe::tok {
namespace {

bool is_chinese_char(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_bert_punct(uint32_t c) {
  if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  return unicode::is_punctuation(unicode::category(c));
}

std::vector<uint32_t> normalize_cps(std::string_view text, const TokenizerSpec& spec) {
  std::vector<uint32_t> cps = unicode::to_code_points(text);
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  for (uint32_t c : cps) {
    if (spec.clean_text) {
      const bool ws = c == '\t' || c == '\n' || c == '\r' || unicode::is_whitespace(c);
      // Hugging Face's is_control: Cc, Cf, Co, Cs; unassigned (Cn) code points are kept.
      const auto cat = unicode::category(c);
      const bool control = unicode::is_other(cat) && cat != unicode::Category::Cn;
      if (!ws && (c == 0 || c == unicode::kReplacementChar || control)) continue;
      if (ws) c = ' ';
    }
    if (spec.chinese_chars && is_chinese_char(c)) {
      out.push_back(' ');
      out.push_back(c);
      out.push_back(' ');
      continue;
    }
    out.push_back(c);
  }
  if (spec.strip_accents) {
    std::vector<uint32_t> d = unicode::nfd(out);
    out.clear();
    for (uint32_t c : d) {
      if (unicode::category(c) != unicode::Category::Mn) out.push_back(c);
    }
  }
  if (spec.lowercase) {
    std::vector<uint32_t> l;
    l.reserve(out.size());
    for (uint32_t c : out) unicode::append_lowercase(c, l);
    out.swap(l);
  }
  return out;
}

class WordPieceModel final : public Model {
 public:
  WordPieceModel(const TokenizerSpec& spec, const TokenIndex& index) : spec_(spec), index_(index) {}

  Status init() {
    if (spec_.unk_id < 0) return error(StatusCode::corrupt_file, "wordpiece tokenizer has no unknown token");
    if (spec_.max_input_chars_per_word <= 0) {
      return error(StatusCode::corrupt_file, "wordpiece max_input_chars_per_word must be positive, got {}",
                   spec_.max_input_chars_per_word);
    }
    return Status::ok();
  }

  void encode(std::string_view segment, std::vector<int32_t>& out) const override {
    const std::vector<uint32_t> cps = normalize_cps(segment, spec_);
    std::vector<uint32_t> word;
    auto flush = [&] {
      if (!word.empty()) encode_word(word, out);
      word.clear();
    };
    for (uint32_t c : cps) {
      if (unicode::is_whitespace(c)) {
        flush();
      } else if (is_bert_punct(c)) {
        flush();
        word.push_back(c);
        flush();
      } else {
        word.push_back(c);
      }
    }
    flush();
  }

 private:
  void encode_word(const std::vector<uint32_t>& word, std::vector<int32_t>& out) const {
    if (word.size() > static_cast<size_t>(spec_.max_input_chars_per_word)) {
      out.push_back(spec_.unk_id);
      return;
    }
    const size_t first = out.size();
    size_t start = 0;
    std::string candidate;
    while (start < word.size()) {
      size_t end = word.size();
      int32_t found = -1;
      while (start < end) {
        candidate.clear();
        if (start > 0) candidate = spec_.continuing_prefix;
        for (size_t k = start; k < end; ++k) unicode::append_utf8(candidate, word[k]);
        found = index_.find(candidate);
        if (found >= 0) break;
        --end;
      }
      if (found < 0) {
        out.resize(first);
        out.push_back(spec_.unk_id);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }

  const TokenizerSpec& spec_;
  const TokenIndex& index_;
};

}  // namespace

std::string bert_normalize(std::string_view text, const TokenizerSpec& spec) {
  return unicode::from_code_points(normalize_cps(text, spec));
}

Result<std::unique_ptr<Model>> make_wordpiece_model(const TokenizerSpec& spec, const TokenIndex& index) {
  auto m = std::make_unique<WordPieceModel>(spec, index);
  LITHE_TRY(m->init());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace lithe::tok
