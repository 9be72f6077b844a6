// Tokenizer: HF tokenizer.json byte-level BPE (Qwen2/Qwen3, Llama 3, GPT-2 layouts).
//
// encode: added tokens are cut out of the raw text first; every other segment
// is normalized (NFC or nothing), pre-tokenized (Split regexes, then
// ByteLevel), and BPE-encoded; with add_special_tokens the post-processor's
// template (e.g. Llama 3's <|begin_of_text|>) wraps the ids.
// decode: tokens are mapped back to bytes by the ByteLevel decoder; bytes
// that do not form valid UTF-8 (ids that split a character) become U+FFFD.
// Anything in tokenizer.json outside this scope (WordPiece, Metaspace,
// dropout, ...) is a bb::Error at load, never a silent approximation.
// A Tokenizer is cheap to copy and safe to use from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bb {

class Tokenizer {
 public:
  static Tokenizer from_file(const std::string& path);
  // `source` names the JSON in error messages.
  static Tokenizer from_json(const std::string& json_text, const std::string& source);

  // Same defaults as HF: special tokens written in the text are always recognised;
  // add_special_tokens only controls the post-processor template.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;   // added tokens, then the vocab
  const std::string& id_to_token(int32_t id) const;                   // bb::Error for an unknown id
  bool is_special(int32_t id) const;
  // Largest id + 1 (vocab and added tokens): the embedding rows a model needs.
  int64_t vocab_size() const;
  const std::string& source() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace bb
