// export_hf_tokenizer: every vocabulary of tests/data/tokenizer-vectors (and the WordPiece one)
// is written as tokenizer.json and read back by lithe's own loader, which must reproduce the
// vectors exactly. With LITHE_TOKENIZER_EXPORT_DIR set the files are kept there, one directory per
// vocabulary, for tests/py/test_tokenizer_export.py to load with Hugging Face `tokenizers`.
#include <gtest/gtest.h>

#include "test_tmp.h"

#include <nlohmann/json.hpp>

#include "lithe/formats/gguf.h"
#include "test_tokenizer_util.h"

namespace lithe {
namespace {

std::filesystem::path export_root() {
  if (const char* env = std::getenv("LITHE_TOKENIZER_EXPORT_DIR"); env != nullptr && *env) return env;
  return lithe_test::tmp_path("tokenizer_export");
}

class TokenizerExport : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerExport, ReloadsWithTheSameIds) {
  const std::string name = GetParam();
  auto file = gguf::File::open((tok_test::vectors_dir() / ("ggml-vocab-" + name + ".gguf")).string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = load_tokenizer(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto dir = export_root() / name;
  const Status st = export_hf_tokenizer(**tok, dir.string(), (*tok)->spec().chat_template);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
  }
  auto back = load_tokenizer_json(dir.string());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ((*back)->vocab_size(), (*tok)->vocab_size());
  EXPECT_EQ((*back)->bos_id(), (*tok)->bos_id());
  EXPECT_EQ((*back)->eos_id(), (*tok)->eos_id());
  EXPECT_EQ((*back)->default_encode_options().add_bos, (*tok)->default_encode_options().add_bos);

  const std::string inp = tok_test::read_all(tok_test::vectors_dir() / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t n = 0;
  for (size_t pos = 0, next; (next = inp.find(sep, pos)) != std::string::npos; pos = next + sep.size()) {
    const std::string text = inp.substr(pos, next - pos);
    auto a = (*tok)->encode(text);
    auto b = (*back)->encode(text);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(*a, *b) << name << ": '" << text << "'";
    EXPECT_EQ((*back)->decode(*b).value(), text);
    ++n;
  }
  EXPECT_EQ(n, 46u);
  if (std::getenv("LITHE_TOKENIZER_EXPORT_DIR") == nullptr) std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerExport,
                         ::testing::Values("gpt-2", "llama-bpe", "llama-spm", "phi-3", "starcoder"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = (ch == '-') ? '_' : ch;
                           return n;
                         });

TEST(TokenizerExportFiles, ConfigHasTemplateAndSpecialTokens) {
  auto file = gguf::File::open((tok_test::vectors_dir() / "ggml-vocab-phi-3.gguf").string());
  ASSERT_TRUE(file.is_ok());
  auto tok = load_tokenizer(*file);
  ASSERT_TRUE(tok.is_ok());
  const auto dir = lithe_test::tmp_path("tok_export_files");
  ASSERT_TRUE(export_hf_tokenizer(**tok, dir.string(), "{{ messages }}").is_ok());
  const auto config = nlohmann::json::parse(tok_test::read_all(dir / "tokenizer_config.json"));
  EXPECT_EQ(config.at("chat_template"), "{{ messages }}");
  EXPECT_EQ(config.at("bos_token"), "<s>");
  EXPECT_EQ(config.at("eos_token"), "<|endoftext|>");
  EXPECT_EQ(config.at("unk_token"), "<unk>");
  EXPECT_EQ(config.at("add_bos_token"), true);
  const auto map = nlohmann::json::parse(tok_test::read_all(dir / "special_tokens_map.json"));
  EXPECT_EQ(map.at("pad_token"), "<|endoftext|>");
  const auto tj = nlohmann::json::parse(tok_test::read_all(dir / "tokenizer.json"));
  EXPECT_EQ(tj.at("model").at("type"), "BPE");
  EXPECT_TRUE(tj.at("model").at("byte_fallback").get<bool>());
  EXPECT_EQ(tj.at("model").at("vocab").size(), 32064u);
  // Writing again replaces the files (atomic rename); no temporary files are left behind.
  ASSERT_TRUE(export_hf_tokenizer(**tok, dir.string(), "").is_ok());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 3u);
  EXPECT_FALSE(nlohmann::json::parse(tok_test::read_all(dir / "tokenizer_config.json")).contains("chat_template"));
  std::filesystem::remove_all(dir);
}

TEST(TokenizerExportFiles, WordPieceRoundTrip) {
  auto tok = load_tokenizer_json((std::filesystem::path(LITHE_TEST_DATA) / "tokenizer" / "all-MiniLM-L6-v2").string());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto dir = export_root() / "all-MiniLM-L6-v2";
  ASSERT_TRUE(export_hf_tokenizer(**tok, dir.string(), "").is_ok());
  auto back = load_tokenizer_json(dir.string());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  for (const char* text : {"Hello, World! naïve café 中文 [CLS] x", "UNAFFABLE tokenization", ""}) {
    EncodeOptions o = (*tok)->default_encode_options();
    o.parse_special = true;
    EXPECT_EQ((*tok)->encode(text, o).value(), (*back)->encode(text, o).value()) << text;
  }
  if (std::getenv("LITHE_TOKENIZER_EXPORT_DIR") == nullptr) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace lithe
