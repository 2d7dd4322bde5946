// Tokenizers: text <-> token ids for the three families of model files.
//
//   bpe        byte-level BPE (GPT-2, Llama-3, Qwen2, StarCoder, SmolLM): ranked merges over the
//              GPT-2 byte alphabet after a pre-tokenizer split; or char-level BPE with byte
//              fallback and the "▁" space convention (Hugging Face Llama/Mistral tokenizer.json).
//   spm        SentencePiece BPE as in GGUF `tokenizer.ggml.model = llama` (Llama-2, Phi-3):
//              score-ordered merges, "▁" for spaces, a dummy "▁" prefix, <0xXX> byte fallback.
//   wordpiece  BERT: normalizer (clean, CJK spacing, accents, lowercase), whitespace/punctuation
//              split, greedy longest-match-first with the "##" continuation prefix.
//
// A Tokenizer is built from a TokenizerSpec (the vocabulary and its rules), which the loaders fill
// from GGUF metadata or a Hugging Face tokenizer.json. Every spec is validated: merges naming
// unknown tokens, ids out of range or missing fields are rejected with the reason.
//
// Added tokens (GGUF token types control/user_defined/unknown, or tokenizer.json `added_tokens`)
// are never split: user-defined ones always match in the text; special (control) ones match only
// with EncodeOptions::parse_special. Matching is leftmost-longest.
//
// Invalid UTF-8 in the text to encode: by default encode() fails with invalid_argument naming
// the byte offset; with EncodeOptions::invalid_utf8 = replace each maximal ill-formed subpart
// becomes U+FFFD first (what Python's bytes.decode(errors="replace") does). Never a crash.
//
// decode() returns the exact bytes of the tokens; they can be invalid UTF-8 when the ids end in the
// middle of a character. StreamDecoder holds such an incomplete tail back until it is complete.
//
// A Tokenizer is immutable after creation: encode/decode are const and safe from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lithe/core/status.h"

namespace lithe {

namespace gguf {
class File;
}

enum class TokenizerKind : uint8_t { bpe, spm, wordpiece };
std::string_view tokenizer_kind_name(TokenizerKind kind);

// Numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenType : uint8_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

// Where a space prefix is added to the text before tokenizing (SentencePiece's dummy prefix,
// HF ByteLevel/Metaspace add_prefix_space). Text is cut into segments at added tokens.
enum class SpacePrefix : uint8_t {
  never,
  always,  // to every non-empty segment: at the start and after each added token (llama.cpp, HF Prepend)
  first,   // only to the segment at the very start of the text (HF Metaspace prepend_scheme "first")
};

enum class InvalidUtf8 : uint8_t { error, replace };

struct EncodeOptions {
  bool add_bos = false;
  bool add_eos = false;
  bool parse_special = false;  // match special (control) tokens written in the text
  InvalidUtf8 invalid_utf8 = InvalidUtf8::error;
};

struct DecodeOptions {
  bool skip_special = false;  // render special tokens as nothing (HF skip_special_tokens)
};

// Extra attributes of an added token (tokenizer.json `added_tokens`).
struct AddedTokenFlags {
  int32_t id = -1;
  bool lstrip = false;  // whitespace before the token is swallowed
  bool rstrip = false;  // whitespace after the token is swallowed
};

// Everything that defines a tokenizer. Loaders fill it; Tokenizer::create validates it.
struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::bpe;
  std::vector<std::string> tokens;  // id -> text as stored (GPT-2 byte alphabet, "▁", "##")
  std::vector<TokenType> types;     // empty: all normal
  std::vector<float> scores;        // spm: merge priority (higher first); required for spm

  // bpe
  std::vector<std::pair<std::string, std::string>> merges;  // (left, right), rank order
  // Pre-tokenizer: a name from the table (pretokenizer_names()) as in GGUF tokenizer.ggml.pre,
  // or, when pre_regexes is non-empty, that explicit sequence of split regexes (each must be one
  // the table implements: see pretokenizer_regexes()). Byte-level BPE only.
  std::string pre = "gpt-2";
  std::vector<std::string> pre_regexes;
  bool byte_level = true;      // map bytes to the GPT-2 byte alphabet before merging
  bool ignore_merges = false;  // a whole word that is a token is taken as is (Llama-3)
  bool metaspace = false;      // char-level BPE: ' ' -> "▁" before merging
  bool metaspace_split = false;  // char-level BPE: also split words before each "▁"
  bool byte_fallback = false;  // unknown characters -> <0xXX> tokens (spm always falls back)
  bool fuse_unk = false;       // consecutive unknown characters give one unk token

  // spm and char-level BPE: space prefix rule (byte-level BPE uses it for add_prefix_space)
  SpacePrefix space_prefix = SpacePrefix::never;
  bool space_prefix_if_missing = false;  // add it only when the segment does not start with ' '

  // wordpiece
  std::string continuing_prefix = "##";
  int max_input_chars_per_word = 100;
  bool clean_text = true, chinese_chars = true, strip_accents = true, lowercase = true;

  // special ids, -1 when absent
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, pad_id = -1, unk_id = -1;
  int32_t sep_id = -1, cls_id = -1, mask_id = -1;
  bool add_bos = false, add_eos = false;  // the model's defaults (default_encode_options)
  std::vector<AddedTokenFlags> added_flags;  // only tokens with lstrip/rstrip
  std::string chat_template;
  std::string source;  // where it came from, for messages
};

class Tokenizer {
 public:
  // Validates the spec and builds the lookup tables.
  static Result<std::unique_ptr<Tokenizer>> create(TokenizerSpec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  Result<std::vector<int32_t>> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // add_bos/add_eos as the model's metadata asks; parse_special off.
  EncodeOptions default_encode_options() const;

  // Exact bytes of the tokens (see the header comment). Errors name an id out of range.
  Result<std::string> decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // The bytes one token contributes (no leading-space removal); error when out of range.
  Result<std::string> token_to_piece(int32_t id) const;

  int32_t vocab_size() const;
  const std::string& token_text(int32_t id) const;  // id must be in range
  TokenType token_type(int32_t id) const;           // undefined when out of range
  std::optional<int32_t> find_token(std::string_view text) const;
  bool is_special(int32_t id) const;  // control or unknown type (skipped by skip_special)
  bool is_eog(int32_t id) const;      // ends generation: eos, eot, eom and known end-of-turn tokens
  const std::vector<int32_t>& eog_ids() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  int32_t unk_id() const;
  TokenizerKind kind() const;
  const TokenizerSpec& spec() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streaming decode: feed ids one at a time, get the text that is complete so far. Bytes of a
// character split across tokens are held back until the rest arrives; flush() returns whatever
// is still held (possibly invalid UTF-8) at the end. The concatenation of all outputs equals
// Tokenizer::decode of all ids with the same options.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options = {});
  Result<std::string> feed(int32_t id);
  Result<std::string> feed(std::span<const int32_t> ids);
  std::string flush();
  void reset();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  DecodeOptions options_;
  std::string pending_;
  bool at_start_ = true;
};

// Pre-tokenizer names (GGUF tokenizer.ggml.pre) and split regexes this build implements.
std::vector<std::string> pretokenizer_names();
std::vector<std::string> pretokenizer_regexes();

// From GGUF metadata (tokenizer.ggml.*): models gpt2 (byte-level BPE), llama (spm), bert (wordpiece).
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const gguf::File& file);
// From a Hugging Face tokenizer.json (a file, or a directory holding tokenizer.json and optionally
// tokenizer_config.json, which supplies bos/eos/pad names, add_bos/add_eos and the chat template).
Result<std::unique_ptr<Tokenizer>> load_tokenizer_json(const std::string& path);
// The same from text already in memory; config_json may be empty.
Result<std::unique_ptr<Tokenizer>> parse_tokenizer_json(std::string_view tokenizer_json,
                                                        std::string_view config_json = {},
                                                        const std::string& source = "tokenizer.json");
// A .gguf file, a tokenizer.json, or a directory with tokenizer.json.
Result<std::unique_ptr<Tokenizer>> load_tokenizer_from_path(const std::string& path);

// Writes dir/tokenizer.json, dir/tokenizer_config.json (with chat_template when non-empty) and
// dir/special_tokens_map.json, each atomically; creates dir. The Hugging Face `tokenizers`
// library loads the result and tokenizes as this Tokenizer does.
Status export_hf_tokenizer(const Tokenizer& tokenizer, const std::string& dir, const std::string& chat_template);
// The tokenizer.json text alone.
Result<std::string> hf_tokenizer_json(const Tokenizer& tokenizer);

}  // namespace lithe
