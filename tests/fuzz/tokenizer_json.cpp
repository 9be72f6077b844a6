// Fuzz target: tokenizer.json through Tokenizer::from_json (what from_file runs on the
// file's text); an accepted tokenizer then encodes a fixed text and decodes every id.
// A bb::Error is a clean rejection; anything else (another exception, a crash, a
// sanitizer report, a leak, a timeout) is a finding.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/data/tokenizer.h"

namespace {
// Letters, digits, punctuation, spaces, a combining accent and a common special token.
const char* kText = "Hello, world! It's 2024:  cafe\xCC\x81 na\xC3\xAFve <|endoftext|> \xE4\xBD\xA0\xE5\xA5\xBD\n\tend";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const bb::Tokenizer t =
        bb::Tokenizer::from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz tokenizer.json");
    const std::vector<int32_t> ids = t.encode(kText);
    t.decode(ids, /*skip_special_tokens=*/true);
    std::vector<int32_t> all;
    for (int32_t id = 0; id < int32_t(std::min<int64_t>(t.vocab_size(), 4096)); ++id)
      if (t.token_to_id(t.id_to_token(id)).has_value()) all.push_back(id);
    t.decode(all);
  } catch (const bb::Error&) {
  }
  return 0;
}
