// UTF-8 decoding and encoding for the tokenizer (strict on input, lossy on decode output).
#pragma once

#include <string>
#include <string_view>

namespace bb::utf8 {

// Code points of `text`; invalid UTF-8 is a bb::Error naming `what` and the byte offset.
std::u32string decode(std::string_view text, const char* what);
// Throws like decode() when `text` is not valid UTF-8, without building the code points.
void check_valid(std::string_view text, const char* what);
void append(std::string& out, char32_t cp);
std::string encode(std::u32string_view cps);
// Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
size_t sequence_length(unsigned char lead);
// Bytes to text the way Rust's String::from_utf8_lossy does: each maximal
// invalid subpart becomes one U+FFFD. This is what HF decode returns when ids
// split a multi-byte character.
std::string from_bytes_lossy(std::string_view bytes);

}  // namespace bb::utf8
