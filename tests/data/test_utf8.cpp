// UTF-8 strict decoding and Rust-style lossy conversion (maximal invalid subparts -> U+FFFD).
#include "bumblebee/data/utf8.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

TEST(Utf8, DecodeAndEncodeRoundTrip) {
  const std::string text = "a\u00e9\u4f60\U0001F916";
  const std::u32string cps = bb::utf8::decode(text, "test");
  ASSERT_EQ(cps.size(), 4u);
  EXPECT_EQ(cps[1], U'\u00e9');
  EXPECT_EQ(cps[3], U'\U0001F916');
  EXPECT_EQ(bb::utf8::encode(cps), text);
}

TEST(Utf8, StrictDecodeNamesTheOffset) {
  try {
    bb::utf8::decode("ab\xff", "my text");
    FAIL() << "no error";
  } catch (const bb::Error& e) {
    EXPECT_NE(std::string(e.what()).find("my text: invalid UTF-8 at byte 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bb::utf8::check_valid("\xed\xa0\x80", "surrogate"), bb::Error);
  EXPECT_THROW(bb::utf8::check_valid("\xc0\xaf", "overlong"), bb::Error);
  EXPECT_NO_THROW(bb::utf8::check_valid("\xf0\x9f\xa4\x96", "emoji"));
}

TEST(Utf8, LossyReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(bb::utf8::from_bytes_lossy("\xe4\xbd"), "\ufffd");          // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(bb::utf8::from_bytes_lossy("a\xffz"), "a\ufffdz");
  EXPECT_EQ(bb::utf8::from_bytes_lossy("\xe4" "A"), "\ufffd" "A");       // bad continuation is kept
  EXPECT_EQ(bb::utf8::from_bytes_lossy("\x80\x80"), "\ufffd\ufffd");   // stray continuations: one each
  EXPECT_EQ(bb::utf8::from_bytes_lossy("\xe4\xbd\xa0"), "\u4f60");
}
