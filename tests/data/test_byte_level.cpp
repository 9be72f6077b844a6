// The GPT-2 byte-level alphabet: known spellings and a lossless round trip of all 256 bytes.
#include "bumblebee/data/byte_level.h"

#include <gtest/gtest.h>

TEST(ByteLevel, KnownSpellings) {
  const auto& chars = bb::byte_level::byte_chars();
  EXPECT_EQ(chars[' '], "\u0120");   // "Ġ"
  EXPECT_EQ(chars['\n'], "\u010a");  // "Ċ"
  EXPECT_EQ(chars['\t'], "\u0109");
  EXPECT_EQ(chars['A'], "A");
  EXPECT_EQ(chars[0xAD], "\u0143");  // the last remapped byte
  EXPECT_EQ(chars[0xE9], "\u00e9");  // printable Latin-1 maps to itself
}

TEST(ByteLevel, AllBytesRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  const std::string spelled = bb::byte_level::encode(all);
  EXPECT_EQ(bb::byte_level::decode_token(spelled), all);
  EXPECT_EQ(bb::byte_level::char_to_byte(U'\u0120'), ' ');
  EXPECT_EQ(bb::byte_level::char_to_byte(U'\u4f60'), -1);
}

TEST(ByteLevel, TokenOutsideTheAlphabetDecodesToItsOwnBytes) {
  // HF's ByteLevel decoder keeps such tokens (added CJK words, say) unchanged.
  EXPECT_EQ(bb::byte_level::decode_token("\u4f60\u597d"), "\u4f60\u597d");
  EXPECT_EQ(bb::byte_level::decode_token("\u0120hi"), " hi");
}
