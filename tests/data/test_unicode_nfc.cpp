// NFC through utf8proc, on the cases that exercise each rule of the algorithm
// (expected values from Python's unicodedata.normalize("NFC", ...)).
#include "bumblebee/data/unicode_nfc.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

using bb::unicode::nfc;

namespace {

class UnicodeNfc : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bb::unicode::nfc_available()) GTEST_SKIP() << "built without utf8proc";
  }
};

}  // namespace

TEST_F(UnicodeNfc, FollowsUnicode15) { EXPECT_EQ(bb::unicode::nfc_unicode_version(), "15.0.0"); }

TEST_F(UnicodeNfc, AsciiAndComposedTextIsUnchanged) {
  EXPECT_EQ(nfc("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(nfc("caf\u00e9 \u4f60\u597d \U0001F916"), "caf\u00e9 \u4f60\u597d \U0001F916");
  EXPECT_EQ(nfc(std::string("a\0e\u0301", 5)), std::string("a\0\u00e9", 4));  // NUL is a character, not the end
}

TEST_F(UnicodeNfc, ComposesBaseAndMark) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("A\u030a\u0301"), "\u01fa");        // composes twice
  EXPECT_EQ(nfc("e\u0301\u0301"), "\u00e9\u0301");  // second acute has nothing left to join
}

TEST_F(UnicodeNfc, SingletonDecompositionsStayDecomposed) {
  EXPECT_EQ(nfc("\u212b"), "\u00c5");        // ANGSTROM SIGN -> A WITH RING
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");  // excluded from recomposition
  EXPECT_EQ(nfc("x\u0344"), "\u1e8d\u0301");
}

TEST_F(UnicodeNfc, ReordersMarksByCombiningClass) {
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");
  EXPECT_EQ(nfc("\u1e0a\u0323"), "\u1e0c\u0307");  // D-dot-above + dot-below -> D-dot-below + dot-above
  EXPECT_EQ(nfc("a\u0328\u0301"), "\u0105\u0301");
}

TEST_F(UnicodeNfc, HangulAndStarterPairs) {
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");
  EXPECT_EQ(nfc("\u0b47\u0b3e"), "\u0b4b");  // two starters that compose
}

TEST_F(UnicodeNfc, RejectsInvalidUtf8) {
  EXPECT_THROW(nfc("e\xcc"), bb::Error);
  EXPECT_THROW(nfc("\x80"), bb::Error);          // a stray continuation byte
  EXPECT_THROW(nfc("\xed\xa0\x80"), bb::Error);  // a surrogate
}
