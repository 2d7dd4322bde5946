// Tokenizer behaviour: special tokens, BOS/EOS, SentencePiece space rules, streaming decode,
// round trips over the SOTU corpus, bad input (invalid UTF-8, ids out of range, inconsistent
// metadata), tokenizer.json errors and the pre-tokenizer split rules.
#include <gtest/gtest.h>

#include <cstdlib>

#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "../../src/tokenizer/pretokenize.h"
#include "lithe/formats/gguf.h"
#include "test_tokenizer_util.h"

namespace lithe {
namespace {

std::unique_ptr<Tokenizer> vocab(const std::string& name) {
  auto file = gguf::File::open((tok_test::vectors_dir() / ("ggml-vocab-" + name + ".gguf")).string());
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (!file.is_ok()) return nullptr;
  auto tok = load_tokenizer(*file);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return tok.is_ok() ? std::move(tok).value() : nullptr;
}

std::vector<int32_t> enc(const Tokenizer& t, std::string_view s, EncodeOptions o = {}) {
  auto r = t.encode(s, o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : std::vector<int32_t>{};
}

std::string dec(const Tokenizer& t, const std::vector<int32_t>& ids, DecodeOptions o = {}) {
  auto r = t.decode(ids, o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : std::string();
}

bool valid_utf8(std::string_view s) {
  // A decoder test helper independent of the library: re-encode check via the library is circular.
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return false;
    }
    i += static_cast<size_t>(n);
  }
  return true;
}

// ---- special tokens, BOS/EOS

TEST(Tokenizer, SpecialTokensParsedOnlyWhenAsked) {
  auto t = vocab("starcoder");
  ASSERT_TRUE(t);
  const std::string text = "a<|endoftext|>b";
  EncodeOptions parse;
  parse.parse_special = true;
  const auto with = enc(*t, text, parse);
  ASSERT_EQ(with.size(), 3u);
  EXPECT_EQ(with[1], 0);
  const auto without = enc(*t, text);
  EXPECT_GT(without.size(), 3u);
  EXPECT_EQ(std::count(without.begin(), without.end(), 0), 0);
  EXPECT_EQ(dec(*t, with), text);
  EXPECT_EQ(dec(*t, without), text);
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(dec(*t, with, skip), "ab");
  EXPECT_TRUE(t->is_special(0));
  EXPECT_TRUE(t->is_eog(0));
  EXPECT_FALSE(t->is_special(with[0]));
  // Leftmost-longest: "<fim_prefix>" is not cut into "<fim_" ... pieces.
  const auto fim = enc(*t, "<fim_prefix>x<fim_suffix>", parse);
  ASSERT_EQ(fim.size(), 3u);
  EXPECT_EQ(t->token_text(fim[0]), "<fim_prefix>");
  EXPECT_EQ(t->token_text(fim[2]), "<fim_suffix>");
}

TEST(Tokenizer, UserDefinedTokensAlwaysMatch) {
  auto t = vocab("phi-3");  // "</s>" is user-defined in this vocabulary, "<|end|>" is control
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token_type(2), TokenType::user_defined);
  const auto ids = enc(*t, "x</s>y");
  EXPECT_NE(std::find(ids.begin(), ids.end(), 2), ids.end());
  const auto end_plain = enc(*t, "<|end|>");
  EXPECT_EQ(std::find(end_plain.begin(), end_plain.end(), 32007), end_plain.end());
  EncodeOptions parse;
  parse.parse_special = true;
  EXPECT_EQ(enc(*t, "<|end|>", parse), std::vector<int32_t>{32007});
  EXPECT_TRUE(t->is_eog(32007));
  EXPECT_TRUE(t->is_eog(32000));
}

TEST(Tokenizer, BosEosFromMetadata) {
  auto t = vocab("llama-spm");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_EQ(t->unk_id(), 0);
  const EncodeOptions d = t->default_encode_options();
  EXPECT_TRUE(d.add_bos);
  EXPECT_FALSE(d.add_eos);
  const auto ids = enc(*t, "Hello", d);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EncodeOptions both;
  both.add_bos = both.add_eos = true;
  const auto ids2 = enc(*t, "Hello", both);
  EXPECT_EQ(ids2.front(), 1);
  EXPECT_EQ(ids2.back(), 2);
  EXPECT_EQ(enc(*t, "", both), (std::vector<int32_t>{1, 2}));
  // Decoding: BOS renders as its text unless skipped; the space of "▁Hello" is dropped only at the start.
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(dec(*t, ids, skip), "Hello");
  EXPECT_EQ(dec(*t, ids), "<s> Hello");
}

// ---- SentencePiece space rules

TEST(Tokenizer, SpmSpacePrefixRules) {
  auto t = vocab("llama-spm");
  ASSERT_TRUE(t);
  const auto hello = enc(*t, "Hello");
  ASSERT_EQ(hello.size(), 1u);
  EXPECT_EQ(t->token_text(hello[0]), "\xE2\x96\x81Hello");  // "▁Hello": the dummy prefix
  EXPECT_TRUE(enc(*t, "").empty());                          // no prefix for empty text
  const auto spaced = enc(*t, " Hello");                     // "▁▁Hello" -> "▁" + "▁Hello"
  ASSERT_EQ(spaced.size(), 2u);
  EXPECT_EQ(spaced[1], hello[0]);
  EXPECT_EQ(dec(*t, spaced), " Hello");
  // After a special token the prefix is added again (llama.cpp and HF Prepend normalizer).
  EncodeOptions parse;
  parse.parse_special = true;
  EXPECT_EQ(enc(*t, "<s>Hello", parse), (std::vector<int32_t>{1, hello[0]}));
  // Byte fallback: a character with no token becomes its UTF-8 bytes.
  const auto clef = enc(*t, "\xF0\x9D\x84\x9E");  // U+1D11E
  ASSERT_EQ(clef.size(), 5u);                      // "▁" + 4 byte tokens
  EXPECT_EQ(t->token_text(clef[1]), "<0xF0>");
  EXPECT_EQ(t->token_type(clef[1]), TokenType::byte);
  EXPECT_EQ(dec(*t, clef), "\xF0\x9D\x84\x9E");
}

// ---- streaming decode

void expect_stream_equals_decode(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamDecoder s(t);
  std::string all;
  for (int32_t id : ids) {
    auto piece = s.feed(id);
    ASSERT_TRUE(piece.is_ok());
    EXPECT_TRUE(valid_utf8(*piece)) << "stream emitted an incomplete character";
    all += *piece;
  }
  all += s.flush();
  EXPECT_EQ(all, dec(t, ids));
}

TEST(Tokenizer, StreamHoldsBackIncompleteCharacters) {
  auto t = vocab("llama-spm");
  ASSERT_TRUE(t);
  const auto clef = enc(*t, "a\xF0\x9D\x84\x9E");  // "▁a" + 4 byte tokens
  ASSERT_EQ(clef.size(), 5u);
  StreamDecoder s(*t);
  EXPECT_EQ(s.feed(clef[0]).value(), "a");  // leading space of the first piece dropped
  EXPECT_EQ(s.feed(clef[1]).value(), "");
  EXPECT_EQ(s.feed(clef[2]).value(), "");
  EXPECT_EQ(s.pending_bytes(), 2u);
  EXPECT_EQ(s.feed(clef[3]).value(), "");
  EXPECT_EQ(s.feed(clef[4]).value(), "\xF0\x9D\x84\x9E");
  EXPECT_EQ(s.flush(), "");
  // An incomplete tail at the end comes out of flush() as raw bytes.
  s.reset();
  EXPECT_EQ(s.feed(clef[1]).value(), "");
  EXPECT_EQ(s.flush(), "\xF0");
  // A sequence that can never complete is not held back.
  const int32_t ff = *t->find_token("<0xFF>");
  s.reset();
  EXPECT_EQ(s.feed(ff).value(), "\xFF");
  // Ids out of range: an error that names the id and the vocabulary size.
  auto bad = s.feed(32000);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("32000"), std::string::npos);
  EXPECT_NE(bad.status().message().find("vocabulary size 32000"), std::string::npos);
}

TEST(Tokenizer, StreamEqualsDecodeOnMultibyteText) {
  const std::string text = "\xF0\x9F\x9A\x80 (normal) \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F "
                           "\xE4\xB8\xAD\xE6\x96\x87 \xD8\xB9\xD8\xB1\xD8\xA8\xD9\x8A \xC3\x84pfel";
  for (const char* name : {"gpt-2", "llama-bpe", "llama-spm", "phi-3", "starcoder"}) {
    auto t = vocab(name);
    ASSERT_TRUE(t);
    const auto ids = enc(*t, text);
    EXPECT_EQ(dec(*t, ids), text) << name;
    expect_stream_equals_decode(*t, ids);
  }
}

// ---- SOTU corpus: round trip and streaming

TEST(Tokenizer, SotuRoundTripAndStreaming) {
  const std::string dir = tok_test::sotu_dir();
  if (dir.empty() && std::getenv("CI") != nullptr) FAIL() << "SOTU corpus missing: run scripts/make-data.sh";
  if (dir.empty()) GTEST_SKIP() << "SOTU corpus not found: run scripts/make-data.sh or set LITHE_SOTU_DIR";
  std::unique_ptr<Tokenizer> t;
  if (const std::string model = tok_test::default_model_path(); !model.empty()) {
    auto file = gguf::File::open(model);
    ASSERT_TRUE(file.is_ok());
    auto loaded = load_tokenizer(*file);
    ASSERT_TRUE(loaded.is_ok());
    t = std::move(loaded).value();
  } else {
    t = vocab("starcoder");  // same family as the default model (digits split, GPT-2 regex)
  }
  ASSERT_TRUE(t);
  const auto spm = vocab("llama-spm");
  size_t files = 0, bytes = 0, tokens = 0;
  for (const auto& f : tok_test::sotu_files(dir)) {
    const std::string text = tok_test::read_all(f);
    const auto ids = enc(*t, text);
    tokens += ids.size();
    bytes += text.size();
    ++files;
    ASSERT_EQ(dec(*t, ids), text) << f;
    StreamDecoder s(*t);
    std::string streamed;
    for (int32_t id : ids) streamed += s.feed(id).value();
    streamed += s.flush();
    ASSERT_EQ(streamed, text) << f;
    if (files % 8 == 0) {  // SentencePiece too, on every 8th address
      ASSERT_EQ(dec(*spm, enc(*spm, text)), text) << f;
    }
  }
  EXPECT_EQ(files, 233u);
  EXPECT_GT(bytes, 10'000'000u);
  EXPECT_GT(tokens, bytes / 8);
}

// ---- bad input

TEST(Tokenizer, InvalidUtf8IsAnErrorOrReplaced) {
  auto t = vocab("gpt-2");
  ASSERT_TRUE(t);
  auto r = t->encode("ab\xFF" "cd");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(r.status().message().find("offset 2"), std::string::npos) << r.status().message();
  EncodeOptions rep;
  rep.invalid_utf8 = InvalidUtf8::replace;
  EXPECT_EQ(enc(*t, "ab\xFF" "cd", rep), enc(*t, "ab\xEF\xBF\xBD" "cd"));
  EXPECT_EQ(enc(*t, "\xE2\x96", rep), enc(*t, "\xEF\xBF\xBD"));  // truncated: one U+FFFD
}

TEST(Tokenizer, RandomBytesNeverCrash) {
  std::mt19937 rng(1234);
  std::vector<std::unique_ptr<Tokenizer>> toks;
  for (const char* name : {"gpt-2", "llama-bpe", "llama-spm", "starcoder"}) toks.push_back(vocab(name));
  auto wp = load_tokenizer_json((std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "all-MiniLM-L6-v2").string());
  ASSERT_TRUE(wp.is_ok());
  toks.push_back(std::move(wp).value());
  EncodeOptions rep;
  rep.invalid_utf8 = InvalidUtf8::replace;
  rep.parse_special = true;
  for (int i = 0; i < 300; ++i) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    for (const auto& t : toks) {
      ASSERT_TRUE(t);
      auto ids = t->encode(s, rep);
      ASSERT_TRUE(ids.is_ok());
      for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < t->vocab_size());
      ASSERT_TRUE(t->decode(*ids).is_ok());
      auto strict = t->encode(s);
      ASSERT_EQ(strict.is_ok(), valid_utf8(s));
    }
  }
}

TEST(Tokenizer, IdsOutOfRangeNameTheIdAndSize) {
  auto t = vocab("gpt-2");
  ASSERT_TRUE(t);
  for (int32_t bad : {-1, 50257, 1 << 30}) {
    const std::vector<int32_t> ids{15496, bad};
    auto r = t->decode(ids);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(r.status().message().find(fmt::format("token id {}", bad)), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("vocabulary size 50257"), std::string::npos);
    EXPECT_FALSE(t->token_to_piece(bad).is_ok());
  }
}

// A small GGUF in memory: a byte-level BPE vocabulary with the merges "a b" -> "ab", "ab c" -> "abc".
struct MiniGguf {
  std::vector<std::string> tokens;
  std::vector<std::string> merges = {"a b", "ab c"};
  std::vector<gguf::Value> extra_keys_values;
  std::vector<std::string> extra_keys;
  std::string model = "gpt2";

  MiniGguf() {
    const std::string alphabet = "abcdefghijklmnopqrstuvwxyz";
    for (char c : alphabet) tokens.emplace_back(1, c);
    tokens.push_back("ab");
    tokens.push_back("abc");
  }
  void set(const std::string& k, gguf::Value v) {
    extra_keys.push_back(k);
    extra_keys_values.push_back(std::move(v));
  }
  Result<std::unique_ptr<Tokenizer>> load(bool with_merges = true, bool with_tokens = true) const {
    gguf::Writer w;
    if (!model.empty()) w.set("tokenizer.ggml.model", gguf::Value::of_string(model));
    if (with_tokens) w.set("tokenizer.ggml.tokens", gguf::Value::of_strings(tokens));
    if (with_merges) w.set("tokenizer.ggml.merges", gguf::Value::of_strings(merges));
    for (size_t i = 0; i < extra_keys.size(); ++i) w.set(extra_keys[i], extra_keys_values[i]);
    auto bytes = w.serialize();
    if (!bytes.is_ok()) return bytes.status();
    auto buf = alloc_host(bytes->size());
    if (!buf.is_ok()) return buf.status();
    std::memcpy((*buf)->data(), bytes->data(), bytes->size());
    auto file = gguf::File::parse(*buf, "mini.gguf");
    if (!file.is_ok()) return file.status();
    return load_tokenizer(*file);
  }
};

void expect_rejected(const Result<std::unique_ptr<Tokenizer>>& r, const std::string& needle) {
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

TEST(Tokenizer, MiniVocabularyWorks) {
  MiniGguf g;
  auto t = g.load();
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(enc(**t, "abcab"), (std::vector<int32_t>{27, 26}));  // "abc" "ab"
  EXPECT_EQ(dec(**t, {27, 26}), "abcab");
}

TEST(Tokenizer, InconsistentMetadataIsRejectedWithTheReason) {
  {
    MiniGguf g;
    g.model.clear();
    expect_rejected(g.load(), "tokenizer.ggml.model");
  }
  {
    MiniGguf g;
    g.model = "t5";
    expect_rejected(g.load(), "'t5' is not supported");
  }
  expect_rejected(MiniGguf().load(true, false), "tokenizer.ggml.tokens");
  expect_rejected(MiniGguf().load(false, true), "tokenizer.ggml.merges");
  {
    MiniGguf g;
    g.merges.push_back("x qq");
    expect_rejected(g.load(), "'qq', which is not in the vocabulary");
  }
  {
    MiniGguf g;
    g.merges.push_back("x y");
    expect_rejected(g.load(), "makes 'xy', which is not in the vocabulary");
  }
  {
    MiniGguf g;
    g.merges.push_back("xy");
    expect_rejected(g.load(), "is not two tokens");
  }
  {
    MiniGguf g;
    g.set("tokenizer.ggml.bos_token_id", gguf::Value::of_u32(999));
    expect_rejected(g.load(), "bos token id 999 is out of range (vocabulary size 28)");
  }
  {
    MiniGguf g;
    g.set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::i32, {gguf::Value::of_i32(1)}));
    expect_rejected(g.load(), "token_type has 1 entries for 28 tokens");
  }
  {
    MiniGguf g;
    gguf::Value::Array types(28, gguf::Value::of_i32(1));
    types[3] = gguf::Value::of_i32(9);
    g.set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::i32, types));
    expect_rejected(g.load(), "token_type[3] = 9");
  }
  {
    MiniGguf g;
    g.set("tokenizer.ggml.pre", gguf::Value::of_string("no-such-pre"));
    expect_rejected(g.load(), "pre-tokenizer 'no-such-pre' is not implemented");
  }
  {
    MiniGguf g;
    g.set("tokenizer.ggml.tokens", gguf::Value::of_u32(3));
    expect_rejected(g.load(), "tokenizer.ggml.tokens");
  }
  {
    MiniGguf g;  // spm without byte tokens or unk
    g.model = "llama";
    expect_rejected(g.load(false, true), "neither byte tokens");
  }
  {
    MiniGguf g;
    g.model = "llama";
    g.set("tokenizer.ggml.scores", gguf::Value::of_array(gguf::ValueType::f32, {gguf::Value::of_f32(0)}));
    expect_rejected(g.load(false, true), "scores has 1 entries for 28 tokens");
  }
}

TEST(Tokenizer, BadTokenizerJsonIsRejected) {
  expect_rejected(parse_tokenizer_json("{not json"), "not a valid tokenizer.json");
  expect_rejected(parse_tokenizer_json(R"({"model": {"type": "Unigram", "vocab": []}})"), "'Unigram' is not supported");
  {  // An id no token names (as Hugging Face allows) is an empty unused token.
    auto holes = parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []}})");
    ASSERT_TRUE(holes.is_ok()) << holes.status().to_string();
    EXPECT_EQ((*holes)->vocab_size(), 3);
    EXPECT_EQ((*holes)->token_type(1), TokenType::unused);
    EXPECT_EQ((*holes)->decode(std::vector<int32_t>{0, 1, 2}).value(), "ab");
    EXPECT_EQ((*holes)->encode("ab").value(), (std::vector<int32_t>{0, 2}));
  }
  expect_rejected(parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})"),
                  "id 0 is given to both");
  expect_rejected(
      parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]},
                               "pre_tokenizer": {"type": "ByteLevel"}})"),
      "'c', which is not in the vocabulary");
  expect_rejected(
      parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                               "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}})"),
      "Split/Digits pre-tokenizers without ByteLevel");
  expect_rejected(
      parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                               "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                                 {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"},
                                 {"type": "ByteLevel", "use_regex": false}]}})"),
      "regex '\\w+' is not implemented");
  expect_rejected(parse_tokenizer_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "dropout": 0.1}})"),
                  "dropout");
  expect_rejected(parse_tokenizer_json(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})"), "no unknown token");
}

// ---- pre-tokenizer rules (hand-coded regexes) on their own

std::vector<std::string> split(const char* preset, std::string_view text) {
  auto rules = tok::pretokenizer_preset(preset);
  EXPECT_TRUE(rules.is_ok());
  tok::PreTokenizer pre(*rules);
  tok::PreTokenizer::Scratch s;
  std::vector<std::pair<uint32_t, uint32_t>> words;
  pre.split(text, s, words);
  std::vector<std::string> out;
  for (auto [b, e] : words) out.emplace_back(text.substr(b, e - b));
  return out;
}

using Words = std::vector<std::string>;

TEST(Tokenizer, PreTokenizerSplits) {
  EXPECT_EQ(split("gpt-2", "Hello world!! It's 2024"), (Words{"Hello", " world", "!!", " It", "'s", " 2024"}));
  EXPECT_EQ(split("gpt-2", "a   b\n\nc\t"), (Words{"a", "  ", " b", "\n", "\n", "c", "\t"}));
  EXPECT_EQ(split("gpt-2", "I'M"), (Words{"I", "'", "M"}));  // GPT-2 contractions are case-sensitive
  EXPECT_EQ(split("llama-bpe", "I'M 12345 (x)\n\n  y"),
            (Words{"I", "'M", " ", "123", "45", " (", "x", ")\n\n", " ", " y"}));
  EXPECT_EQ(split("qwen2", "x 123"), (Words{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "a1 22"), (Words{"a", "1", " ", "2", "2"}));
  EXPECT_EQ(split("gpt-2", ""), Words{});
  EXPECT_EQ(split("llama-bpe", "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE4\xB8\xAD"),  // Arabic word, CJK
            (Words{"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7", " \xE4\xB8\xAD"}));
  EXPECT_FALSE(tok::pretokenizer_preset("nonexistent").is_ok());
  for (const auto& name : pretokenizer_names()) EXPECT_TRUE(tok::pretokenizer_preset(name).is_ok()) << name;
}

// Every hand-coded rule against Hugging Face's Split pre-tokenizer running the real regex
// (Oniguruma) on 2000+ strings (tests/gen/gen_tokenizer_golden.py, pretokenizer_golden.jsonl).
TEST(Tokenizer, PreTokenizersMatchOniguruma) {
  std::istringstream lines(tok_test::read_all(std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "pretokenizer_golden.jsonl"));
  std::string line;
  ASSERT_TRUE(static_cast<bool>(std::getline(lines, line)));  // header
  size_t n = 0, failures = 0;
  while (std::getline(lines, line)) {
    const auto c = nlohmann::json::parse(line);
    const std::string pre = c.at("pre").get<std::string>();
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("words").get<Words>();
    ++n;
    const auto got = split(pre.c_str(), text);
    if (got != want && ++failures <= 10) {
      std::string g, w;
      for (const auto& x : got) g += "[" + x + "]";
      for (const auto& x : want) w += "[" + x + "]";
      ADD_FAILURE() << pre << ": '" << text << "'\n  got: " << g << "\n want: " << w;
    }
  }
  EXPECT_GT(n, 2000u);
  EXPECT_EQ(failures, 0u) << "of " << n;
}

// ---- WordPiece decoding

TEST(Tokenizer, WordPieceDecode) {
  auto t = load_tokenizer_json((std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "all-MiniLM-L6-v2").string());
  ASSERT_TRUE(t.is_ok());
  const auto ids = enc(**t, "Tokenization isn't hard");
  EXPECT_EQ(dec(**t, ids), "tokenization isn ' t hard");
  EncodeOptions special = (*t)->default_encode_options();
  EXPECT_TRUE(special.add_bos && special.add_eos);
  const auto with = enc(**t, "hi", special);
  EXPECT_EQ(with.front(), 101);
  EXPECT_EQ(with.back(), 102);
  DecodeOptions skip;
  skip.skip_special = true;
  EXPECT_EQ(dec(**t, with, skip), "hi");
  EXPECT_EQ(dec(**t, with), "[CLS] hi [SEP]");
}

}  // namespace
}  // namespace lithe
