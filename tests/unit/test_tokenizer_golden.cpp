// The default model's tokenizer against golden ids from an independent implementation (Hugging
// Face tokenizers on SmolLM2's tokenizer configuration; tests/gen/gen_tokenizer_golden.py), on 400+
// varied strings; decode must give each string back.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "lithe/formats/gguf.h"
#include "test_tokenizer_util.h"

namespace lithe {
namespace {

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += fmt::format(" {}", id);
  return s;
}

// Checks every case of a golden file; returns the number of cases.
size_t check_golden(const Tokenizer& tok, const std::string& file_name) {
  std::istringstream lines(tok_test::read_all(std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / file_name));
  std::string line;
  if (!std::getline(lines, line)) {  // header
    ADD_FAILURE() << file_name << " is empty or missing";
    return 0;
  }
  const auto header = nlohmann::json::parse(line);
  size_t n = 0, failures = 0;
  while (std::getline(lines, line)) {
    const auto c = nlohmann::json::parse(line);
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EncodeOptions o;
    o.parse_special = c.at("parse_special").get<bool>();
    o.add_bos = o.add_eos = c.value("add_special", false);
    auto ids = tok.encode(text, o);
    EXPECT_TRUE(ids.is_ok()) << ids.status().to_string();
    if (!ids.is_ok()) return n;
    ++n;
    if (*ids != want) {
      if (++failures <= 10) {
        ADD_FAILURE() << "'" << text.substr(0, 200) << "' parse_special=" << o.parse_special << "\n  got: " << show(*ids)
                      << "\n want: " << show(want);
      }
      continue;
    }
    if (tok.kind() != TokenizerKind::wordpiece) {  // WordPiece normalizes: not reversible
      auto back = tok.decode(*ids);
      EXPECT_TRUE(back.is_ok());
      EXPECT_EQ(back.value(), text);
    }
  }
  EXPECT_EQ(n, header.at("cases").get<size_t>()) << file_name;
  EXPECT_EQ(failures, 0u) << "of " << n << " in " << file_name;
  return n;
}

std::unique_ptr<Tokenizer> default_tokenizer() {
  const std::string model = tok_test::default_model_path();
  if (model.empty()) return nullptr;
  auto file = gguf::File::open(model);
  EXPECT_TRUE(file.is_ok()) << file.status().to_string();
  if (!file.is_ok()) return nullptr;
  auto tok = load_tokenizer(*file);
  EXPECT_TRUE(tok.is_ok()) << tok.status().to_string();
  return tok.is_ok() ? std::move(tok).value() : nullptr;
}

TEST(TokenizerGolden, DefaultModelMatchesReference) {
  auto tok = default_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not found: run scripts/fetch-model.sh or set LITHE_TEST_MODEL";
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->spec().pre, "smollm");
  EXPECT_GE(check_golden(*tok, "smollm2_golden.jsonl"), 300u);
}

// Export to tokenizer.json and load it back: the same ids on every golden string. With
// LITHE_TOKENIZER_EXPORT_DIR set, the files stay in DIR/smollm2 (tests/py/test_tokenizer_export.py).
TEST(TokenizerExportGolden, DefaultModelThroughExportedTokenizerJson) {
  auto tok = default_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not found: run scripts/fetch-model.sh or set LITHE_TEST_MODEL";
  const char* keep = std::getenv("LITHE_TOKENIZER_EXPORT_DIR");
  const auto dir = (keep != nullptr && *keep) ? std::filesystem::path(keep) / "smollm2"
                                              : lithe_test::tmp_path("tok_export_smollm2");
  ASSERT_TRUE(export_hf_tokenizer(*tok, dir.string(), tok->spec().chat_template).is_ok());
  auto back = load_tokenizer_json(dir.string());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ((*back)->spec().chat_template, tok->spec().chat_template);
  EXPECT_EQ((*back)->eos_id(), tok->eos_id());
  EXPECT_EQ((*back)->bos_id(), tok->bos_id());
  EXPECT_GE(check_golden(**back, "smollm2_golden.jsonl"), 300u);
  if (keep == nullptr || !*keep) std::filesystem::remove_all(dir);
}

TEST(TokenizerGolden, WordPieceMatchesReference) {
  auto tok = load_tokenizer_json((std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "all-MiniLM-L6-v2").string());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->kind(), TokenizerKind::wordpiece);
  EXPECT_EQ((*tok)->vocab_size(), 30522);
  EXPECT_GE(check_golden(**tok, "minilm_golden.jsonl"), 300u);
}

// The same vocabulary as a GGUF `bert` tokenizer, written the way llama.cpp's converter does
// (word starts "▁word", continuations without "##", [..] tokens unchanged): same golden ids.
TEST(TokenizerGolden, WordPieceFromGguf) {
  auto json_tok = load_tokenizer_json((std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "all-MiniLM-L6-v2").string());
  ASSERT_TRUE(json_tok.is_ok()) << json_tok.status().to_string();
  const TokenizerSpec& spec = (*json_tok)->spec();
  std::vector<std::string> phantom;
  gguf::Value::Array types;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const std::string& t = spec.tokens[i];
    if (t.size() >= 2 && t.front() == '[' && t.back() == ']') {
      phantom.push_back(t);
    } else if (t.rfind("##", 0) == 0) {
      phantom.push_back(t.substr(2));
    } else {
      phantom.push_back("\xE2\x96\x81" + t);
    }
    types.push_back(gguf::Value::of_i32(static_cast<int32_t>(spec.types[i])));
  }
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::of_string("bert"));
  w.set("tokenizer.ggml.tokens", gguf::Value::of_strings(phantom));
  w.set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::i32, types));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::of_u32(100));
  w.set("tokenizer.ggml.cls_token_id", gguf::Value::of_u32(101));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::of_u32(102));
  w.set("tokenizer.ggml.padding_token_id", gguf::Value::of_u32(0));
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.is_ok());
  auto buf = alloc_host(bytes->size());
  ASSERT_TRUE(buf.is_ok());
  std::memcpy((*buf)->data(), bytes->data(), bytes->size());
  auto file = gguf::File::parse(*buf, "bert.gguf");
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = load_tokenizer(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->spec().tokens, spec.tokens);
  EXPECT_TRUE((*tok)->default_encode_options().add_bos);
  EXPECT_TRUE((*tok)->default_encode_options().add_eos);
  EXPECT_GE(check_golden(**tok, "minilm_golden.jsonl"), 300u);
}

}  // namespace
}  // namespace lithe
