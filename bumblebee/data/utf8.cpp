// UTF-8 decoding (strict and lossy) and encoding.
#include "bumblebee/data/utf8.h"

#include "bumblebee/core/error.h"

namespace bb::utf8 {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

// Length of the valid UTF-8 sequence at bytes[i], or 0 with `bad` set to the
// length of the maximal invalid subpart (the Unicode "substitution of maximal
// subparts" rule: stop at the first byte that cannot continue the sequence).
size_t valid_sequence(std::string_view bytes, size_t i, char32_t& cp, size_t& bad) {
  const auto b0 = static_cast<unsigned char>(bytes[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;   // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
  } else {
    bad = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= bytes.size()) {
      bad = k;
      return 0;
    }
    const auto b = static_cast<unsigned char>(bytes[i + k]);
    const unsigned char first_lo = k == 1 ? lo : 0x80, first_hi = k == 1 ? hi : 0xBF;
    if (b < first_lo || b > first_hi) {
      bad = k;
      return 0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  return need + 1;
}

}  // namespace

size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

std::u32string decode(std::string_view text, const char* what) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    size_t bad = 0;
    const size_t n = valid_sequence(text, i, cp, bad);
    BB_CHECK(n > 0, what, ": invalid UTF-8 at byte ", i);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void check_valid(std::string_view text, const char* what) {
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp = 0;
    size_t bad = 0;
    const size_t n = valid_sequence(text, i, cp, bad);
    BB_CHECK(n > 0, what, ": invalid UTF-8 at byte ", i);
    i += n;
  }
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append(out, cp);
  return out;
}

std::string from_bytes_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    char32_t cp = 0;
    size_t bad = 0;
    const size_t n = valid_sequence(bytes, i, cp, bad);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      append(out, kReplacement);
      i += bad;
    }
  }
  return out;
}

}  // namespace bb::utf8
