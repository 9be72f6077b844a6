// NFC: canonical decomposition, canonical ordering of combining marks, canonical composition.
#include "bumblebee/data/unicode_nfc.h"

#include <algorithm>

#include "bumblebee/data/unicode_nfc_tables.h"
#include "bumblebee/data/utf8.h"

namespace bb::unicode {

namespace {

// Hangul syllables decompose and compose arithmetically (Unicode ch. 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = kCombiningClasses + kNumCombiningClasses;
  const auto* it = std::lower_bound(kCombiningClasses, end, cp,
                                    [](const CombiningClass& e, char32_t c) { return e.cp < c; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = kDecompositions + kNumDecompositions;
  const auto* it = std::lower_bound(kDecompositions, end, cp,
                                    [](const Decomposition& e, char32_t c) { return e.cp < c; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0 when they do not compose.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto* end = kCompositions + kNumCompositions;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{first, second},
                                    [](const Composition& e, const std::pair<char32_t, char32_t>& k) {
                                      return std::pair{e.first, e.second} < k;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 nothing decomposes into, or composes from, anything else.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; }))
    return std::string(text);

  std::u32string decomposed;
  for (char32_t cp : utf8::decode(text, "NFC input")) decompose(cp, decomposed);

  // Canonical ordering: stable-sort each run of combining marks by class.
  for (size_t i = 0; i < decomposed.size();) {
    if (combining_class(decomposed[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < decomposed.size() && combining_class(decomposed[j]) != 0) ++j;
    std::stable_sort(decomposed.begin() + i, decomposed.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }

  // Canonical composition: a mark composes with the last starter unless a
  // character in between has class 0 or a class >= its own (it is "blocked").
  std::u32string out;
  out.reserve(decomposed.size());
  size_t starter = std::u32string::npos;
  uint8_t last_class = 0;
  for (char32_t cp : decomposed) {
    const uint8_t cls = combining_class(cp);
    if (starter != std::u32string::npos) {
      const bool adjacent = starter + 1 == out.size();
      const bool blocked = !adjacent && (last_class == 0 || last_class >= cls);
      if (!blocked) {
        if (char32_t c = compose(out[starter], cp)) {
          out[starter] = c;
          continue;
        }
      }
    }
    if (cls == 0) starter = out.size();
    last_class = cls;
    out.push_back(cp);
  }
  return utf8::encode(out);
}

}  // namespace bb::unicode
