// NFC through utf8proc; without utf8proc, an nfc() that refuses to run.
#include "bumblebee/data/unicode_nfc.h"

#include "bumblebee/core/error.h"

#ifdef BB_WITH_UTF8PROC

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "bumblebee/data/utf8.h"

namespace bb::unicode {

bool nfc_available() { return true; }

std::string nfc_unicode_version() { return utf8proc_unicode_version(); }

std::string nfc(std::string_view text) {
  // ASCII is its own NFC; most tokenizer input is, so it skips the copy through utf8proc.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  // Our own check, so invalid input fails with the byte offset, as everywhere in the tokenizer.
  utf8::check_valid(text, "NFC input");
  // What utf8proc_NFC does, with an explicit length so NUL bytes in the text survive.
  utf8proc_uint8_t* composed = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &composed, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  BB_CHECK(n >= 0, "utf8proc NFC of ", text.size(), " bytes failed: ", utf8proc_errmsg(n));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(composed, &std::free);
  return std::string(reinterpret_cast<const char*>(composed), static_cast<size_t>(n));
}

}  // namespace bb::unicode

#else

namespace bb::unicode {

bool nfc_available() { return false; }

std::string nfc_unicode_version() { return ""; }

std::string nfc(std::string_view) {
  BB_FAIL("this build has no utf8proc, which the tokenizer's NFC normalizer needs: "
          "install libutf8proc-dev and re-run cmake");
}

}  // namespace bb::unicode

#endif  // BB_WITH_UTF8PROC
