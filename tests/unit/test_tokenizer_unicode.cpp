// Unicode helpers of the tokenizer: UTF-8 validation, replacement, incomplete tails, categories.
#include <gtest/gtest.h>

#include "../../src/tokenizer/unicode.h"

namespace lithe::unicode {
namespace {

TEST(TokenizerUnicode, DecodesAndRejectsIllFormedUtf8) {
  uint32_t cp = 0;
  EXPECT_EQ(decode_utf8("\xE2\x96\x81", 0, &cp), 3);
  EXPECT_EQ(cp, 0x2581u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x81", 0, &cp), 4);
  EXPECT_EQ(cp, 0x1F601u);
  EXPECT_EQ(decode_utf8("\xC0\xAF", 0, &cp), 0);          // overlong
  EXPECT_EQ(decode_utf8("\xED\xA0\x80", 0, &cp), 0);      // surrogate
  EXPECT_EQ(decode_utf8("\xF4\x90\x80\x80", 0, &cp), 0);  // > U+10FFFF
  EXPECT_EQ(decode_utf8("\xE2\x96", 0, &cp), 0);          // truncated
  EXPECT_EQ(decode_utf8("\x80", 0, &cp), 0);              // stray continuation
  EXPECT_EQ(find_invalid_utf8("abc\xE2\x96\x81"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xFF" "c"), 2u);
}

TEST(TokenizerUnicode, ReplacesMaximalSubparts) {
  // "\xE2\x96" is one maximal subpart (a valid prefix), "\xFF" another: two U+FFFD.
  EXPECT_EQ(replace_invalid_utf8("a\xE2\x96" "b\xFF"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(replace_invalid_utf8("\xF0\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(replace_invalid_utf8("ok"), "ok");
}

TEST(TokenizerUnicode, IncompleteSuffix) {
  EXPECT_EQ(incomplete_utf8_suffix("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE2"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE2\x96"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE2\x96\x81"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_suffix("\xFF"), 0u);      // never completes: emitted as is
  EXPECT_EQ(incomplete_utf8_suffix("\xE0\x80"), 0u);  // overlong prefix: never completes
  EXPECT_EQ(incomplete_utf8_suffix(""), 0u);
}

TEST(TokenizerUnicode, Categories) {
  EXPECT_EQ(category('a'), Category::Ll);
  EXPECT_EQ(category('7'), Category::Nd);
  EXPECT_EQ(category(0x4E2D), Category::Lo);    // 中
  EXPECT_EQ(category(0x0661), Category::Nd);    // Arabic-Indic one
  EXPECT_EQ(category(0x00BD), Category::No);    // ½
  EXPECT_EQ(category(0x1F600), Category::So);   // emoji
  EXPECT_EQ(category(0x0301), Category::Mn);
  EXPECT_EQ(category(0xE000), Category::Co);
  EXPECT_EQ(category(0x10FFFF), Category::Cn);
  EXPECT_TRUE(is_whitespace(' '));
  EXPECT_TRUE(is_whitespace('\n'));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_TRUE(is_whitespace(0x85));
  EXPECT_FALSE(is_whitespace(0x200B));  // zero width space is Cf, not White_Space
  EXPECT_STREQ(unicode_version(), "14.0.0");
}

TEST(TokenizerUnicode, LowercaseAndNfd) {
  std::vector<uint32_t> l;
  append_lowercase('A', l);
  append_lowercase(0x0130, l);  // İ -> i + combining dot
  append_lowercase(0x03A3, l);  // Σ -> σ (no final-sigma context)
  EXPECT_EQ(l, (std::vector<uint32_t>{'a', 'i', 0x0307, 0x03C3}));
  EXPECT_EQ(nfd({0x00E9}), (std::vector<uint32_t>{'e', 0x0301}));
  EXPECT_EQ(nfd({0xAC01}), (std::vector<uint32_t>{0x1100, 0x1161, 0x11A8}));  // 각
  // Canonical ordering: dot below (220) before acute (230).
  EXPECT_EQ(nfd({'a', 0x0301, 0x0323}), (std::vector<uint32_t>{'a', 0x0323, 0x0301}));
}

}  // namespace
}  // namespace lithe::unicode
