// Unicode Normalization Form C, the normalizer of Qwen2/Qwen3 tokenizer.json files.
#pragma once

#include <string>
#include <string_view>

namespace bb::unicode {

// NFC of valid UTF-8 text (invalid UTF-8 is a bb::Error).
std::string nfc(std::string_view text);

}  // namespace bb::unicode
