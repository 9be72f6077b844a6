// The Unicode data NFC needs, as sorted arrays (defined in the generated unicode_nfc_tables.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace bb::unicode {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {   // canonical; second == 0 for a singleton
  char32_t cp;
  char32_t first;
  char32_t second;
};
struct Composition {     // primary composites, sorted by (first, second)
  char32_t first;
  char32_t second;
  char32_t composite;
};

extern const CombiningClass kCombiningClasses[];
extern const size_t kNumCombiningClasses;
extern const Decomposition kDecompositions[];
extern const size_t kNumDecompositions;
extern const Composition kCompositions[];
extern const size_t kNumCompositions;

}  // namespace bb::unicode
