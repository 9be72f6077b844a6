// The Split pre-tokenizer on PCRE2: Qwen2's pattern on text whose pieces are known.
#include "bumblebee/data/regex_split.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"
#include "data_test_support.h"

namespace {
const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::vector<std::string> split(const bb::RegexSplitter& s, std::string_view text) {
  std::vector<std::string_view> pieces;
  s.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}
}  // namespace

TEST(RegexSplit, Qwen2PatternPieces) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::RegexSplitter s(kQwen2, false);
  using V = std::vector<std::string>;
  EXPECT_EQ(split(s, "Hello  world123"), (V{"Hello", " ", " world", "1", "2", "3"}));
  EXPECT_EQ(split(s, "I'm OK'S"), (V{"I", "'m", " OK", "'S"}));
  EXPECT_EQ(split(s, "a\n\n  b"), (V{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(split(s, "\u4f60\u597d\uff0c\u4e16\u754c"), (V{"\u4f60\u597d", "\uff0c\u4e16\u754c"}));
  EXPECT_EQ(split(s, "x   "), (V{"x", "   "}));
  EXPECT_EQ(split(s, ""), V{});
}

TEST(RegexSplit, GapsBetweenMatchesArePieces) {
  BB_SKIP_WITHOUT_PCRE2();
  bb::RegexSplitter s(R"(\d+)", false);
  using V = std::vector<std::string>;
  EXPECT_EQ(split(s, "ab12cd345"), (V{"ab", "12", "cd", "345"}));
  bb::RegexSplitter literal("a.b", true);
  EXPECT_EQ(split(literal, "xa.bya_b"), (V{"x", "a.b", "ya_b"}));
}

TEST(RegexSplit, BadPatternAndBadTextAreErrors) {
  BB_SKIP_WITHOUT_PCRE2();
  EXPECT_THROW(bb::RegexSplitter("(unclosed", false), bb::Error);
  bb::RegexSplitter s(kQwen2, false);
  std::vector<std::string_view> pieces;
  EXPECT_THROW(s.split("bad \xff utf8", pieces), bb::Error);
}
