// NFC against Python's unicodedata.normalize("NFC", ...) on the cases that exercise each rule.
#include "bumblebee/data/unicode_nfc.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

using bb::unicode::nfc;

TEST(UnicodeNfc, AsciiAndComposedTextIsUnchanged) {
  EXPECT_EQ(nfc("plain ASCII\n"), "plain ASCII\n");
  EXPECT_EQ(nfc("caf\u00e9 \u4f60\u597d \U0001F916"), "caf\u00e9 \u4f60\u597d \U0001F916");
}

TEST(UnicodeNfc, ComposesBaseAndMark) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("A\u030a\u0301"), "\u01fa");     // composes twice
  EXPECT_EQ(nfc("e\u0301\u0301"), "\u00e9\u0301");  // second acute has nothing left to join
}

TEST(UnicodeNfc, SingletonDecompositionsStayDecomposed) {
  EXPECT_EQ(nfc("\u212b"), "\u00c5");   // ANGSTROM SIGN -> A WITH RING
  EXPECT_EQ(nfc("\u0344"), "\u0308\u0301");   // excluded from recomposition
  EXPECT_EQ(nfc("x\u0344"), "\u1e8d\u0301");
}

TEST(UnicodeNfc, ReordersMarksByCombiningClass) {
  EXPECT_EQ(nfc("q\u0307\u0323"), "q\u0323\u0307");
  EXPECT_EQ(nfc("\u1e0a\u0323"), "\u1e0c\u0307");   // D-dot-above + dot-below -> D-dot-below + dot-above
  EXPECT_EQ(nfc("a\u0328\u0301"), "\u0105\u0301");
}

TEST(UnicodeNfc, HangulAndStarterPairs) {
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");
  EXPECT_EQ(nfc("\u0b47\u0b3e"), "\u0b4b");   // two starters that compose
}

TEST(UnicodeNfc, RejectsInvalidUtf8) { EXPECT_THROW(nfc("e\xcc"), bb::Error); }
