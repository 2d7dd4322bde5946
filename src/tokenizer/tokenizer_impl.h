// Internal pieces shared by the tokenizer models (bpe.cpp, spm.cpp, wordpiece.cpp), the loaders
// and the exporter. One seam per extension: a model kind implements `Model`; a pre-tokenizer is a
// row in pretokenize.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lithe/tokenizer/tokenizer.h"
#include "pretokenize.h"

namespace lithe::tok {

inline constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

// GPT-2's reversible byte -> printable character table ("bytes_to_unicode").
const std::array<std::string, 256>& byte_to_unicode();
// Inverse: the byte a code point stands for, or -1 when it is not in the alphabet.
int unicode_to_byte(uint32_t cp);
// Decodes a byte-level token text to bytes (characters outside the alphabet are kept as UTF-8).
std::string byte_level_decode(std::string_view text);
// "<0x0A>" -> 10, else -1.
int parse_byte_token(std::string_view text);

// Text -> id over the spec's tokens (first occurrence wins; empty texts are not indexed).
class TokenIndex {
 public:
  void build(const std::vector<std::string>& tokens);
  int32_t find(std::string_view text) const {
    auto it = map_.find(text);
    return it == map_.end() ? -1 : it->second;
  }

 private:
  std::unordered_map<std::string_view, int32_t> map_;
};

// A model turns one segment of text (valid UTF-8, no added tokens inside, space prefix already
// applied) into ids.
class Model {
 public:
  virtual ~Model() = default;
  virtual void encode(std::string_view segment, std::vector<int32_t>& out) const = 0;
};

Result<std::unique_ptr<Model>> make_bpe_model(const TokenizerSpec& spec, const TokenIndex& index);
Result<std::unique_ptr<Model>> make_spm_model(const TokenizerSpec& spec, const TokenIndex& index);
Result<std::unique_ptr<Model>> make_wordpiece_model(const TokenizerSpec& spec, const TokenIndex& index);

// The rule sequence a BPE spec asks for (pre_regexes, else the `pre` preset).
Result<std::vector<const SplitRule*>> spec_split_rules(const TokenizerSpec& spec);

// BERT normalizer + pre-tokenizer (wordpiece.cpp), exposed for tests.
std::string bert_normalize(std::string_view text, const TokenizerSpec& spec);

}  // namespace lithe::tok

namespace lithe {

struct Tokenizer::Impl {
  TokenizerSpec spec;
  tok::TokenIndex index;
  std::unique_ptr<tok::Model> model;
  std::vector<std::string> pieces;       // bytes each id decodes to (wordpiece: continuation form)
  std::vector<uint8_t> special;          // is_special per id
  std::vector<uint8_t> eog;              // is_eog per id
  std::vector<int32_t> eog_ids;
  bool strip_first_space = false;        // decode drops the leading ' ' of the first piece
  // Added tokens, grouped by first byte, each group longest first.
  struct Added {
    std::string_view text;
    int32_t id;
    bool special;
    bool lstrip;
    bool rstrip;
  };
  std::array<std::vector<Added>, 256> added;
  std::array<bool, 256> added_first{};

  // Appends the decoded bytes of `id` (in range) and updates the at-start state.
  void append_piece(int32_t id, bool& at_start, const DecodeOptions& options, std::string& out) const;
};

}  // namespace lithe
