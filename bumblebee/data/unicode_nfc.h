// Unicode Normalization Form C, the normalizer of Qwen2/Qwen3 tokenizer.json files.
//
// The Unicode data and the algorithm come from utf8proc (libutf8proc-dev). A
// build without its headers (BB_WITH_UTF8PROC unset) still compiles every
// caller; normalising there is a bb::Error saying so.
#pragma once

#include <string>
#include <string_view>

namespace bb::unicode {

// NFC of valid UTF-8 text (invalid UTF-8 is a bb::Error).
std::string nfc(std::string_view text);
// Whether this build has utf8proc, so nfc() works.
bool nfc_available();
// The Unicode version whose data nfc() follows ("15.0.0" for utf8proc 2.8; "" without utf8proc).
std::string nfc_unicode_version();

}  // namespace bb::unicode
