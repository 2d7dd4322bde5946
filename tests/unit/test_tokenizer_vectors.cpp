// llama.cpp's tokenizer test vectors (tests/data/tokenizer-vectors, MIT): for each vocabulary,
// every test string must encode to exactly the ids that Hugging Face tokenizers produced
// (add_special_tokens=False), and decode back to the string.
#include <gtest/gtest.h>

#include "lithe/formats/gguf.h"
#include "test_tokenizer_util.h"

namespace lithe {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const std::string& name) {
  const auto dir = tok_test::vectors_dir();
  const std::string inp = tok_test::read_all(dir / (name + ".inp"));
  const std::string out = tok_test::read_all(dir / (name + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  size_t pos = 0;
  while (true) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Case> cases;
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= texts.size()) break;
    Case c{texts[i++], {}};
    std::istringstream ids(line);
    int32_t id = 0;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << name;
  return cases;
}

class TokenizerVectors : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVectors, EncodeMatchesAndDecodeRoundTrips) {
  const std::string name = "ggml-vocab-" + GetParam() + ".gguf";
  auto file = gguf::File::open((tok_test::vectors_dir() / name).string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = load_tokenizer(*file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto cases = read_cases(name);
  ASSERT_EQ(cases.size(), 46u);
  int failures = 0;
  for (const auto& c : cases) {
    auto ids = (*tok)->encode(c.text);
    ASSERT_TRUE(ids.is_ok()) << ids.status().to_string();
    if (*ids != c.ids) {
      ++failures;
      std::string got, want;
      for (int32_t id : *ids) got += fmt::format(" {}", id);
      for (int32_t id : c.ids) want += fmt::format(" {}", id);
      ADD_FAILURE() << name << ": '" << c.text << "'\n  got: " << got << "\n want: " << want;
      continue;
    }
    auto text = (*tok)->decode(*ids);
    ASSERT_TRUE(text.is_ok());
    EXPECT_EQ(*text, c.text) << name;
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerVectors,
                         ::testing::Values("gpt-2", "llama-bpe", "llama-spm", "phi-3", "starcoder"),
                         [](const auto& param_info) {
                           std::string n = param_info.param;
                           for (char& ch : n) ch = (ch == '-') ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace lithe
