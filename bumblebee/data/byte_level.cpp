// Byte <-> character tables of the GPT-2 byte-level alphabet.
#include "bumblebee/data/byte_level.h"

#include "bumblebee/data/utf8.h"

namespace bb::byte_level {

namespace {

// Every character of the alphabet is below U+0144 (256 + 68 remapped bytes).
constexpr char32_t kAlphabetEnd = 0x144;

struct Tables {
  std::array<std::string, 256> byte_chars;
  std::array<int, kAlphabetEnd> char_byte;
  Tables() {
    char_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t cp = printable ? char32_t(b) : next++;
      utf8::append(byte_chars[size_t(b)], cp);
      char_byte[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_chars() { return tables().byte_chars; }

int char_to_byte(char32_t cp) { return cp < kAlphabetEnd ? tables().char_byte[cp] : -1; }

std::string encode(std::string_view bytes) {
  const auto& chars = byte_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += chars[static_cast<unsigned char>(c)];
  return out;
}

std::string decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char32_t cp : utf8::decode(token, "byte-level token")) {
    const int b = char_to_byte(cp);
    if (b < 0) return std::string(token);
    out.push_back(char(b));
  }
  return out;
}

}  // namespace bb::byte_level
