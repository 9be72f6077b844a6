// The GPT-2 byte-level alphabet: every byte maps to one printable Unicode character.
//
// Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen2/3) store tokens as
// strings over this alphabet, so a space is "Ġ" and a newline "Ċ". Printable
// Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace bb::byte_level {

// UTF-8 spelling of each byte's character.
const std::array<std::string, 256>& byte_chars();
// The byte a character stands for, or -1 when the character is not in the alphabet.
int char_to_byte(char32_t cp);
// Raw bytes -> their byte-level string (what the vocabulary holds).
std::string encode(std::string_view bytes);
// A vocabulary token -> raw bytes, as HF's ByteLevel decoder does: when any
// character is outside the alphabet (an added token such as a CJK word) the
// token's own UTF-8 bytes are used unchanged.
std::string decode_token(std::string_view token);

}  // namespace bb::byte_level
