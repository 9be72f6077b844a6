// AddedVocabulary: tokenizer.json's added_tokens, found in text before any BPE.
//
// Added tokens (special ones like <|im_start|> and plain ones like <tool_call>)
// are matched in the raw text leftmost-longest, as HF does; the text between
// them goes through normalizer, pre-tokenizer and BPE. lstrip/rstrip let a
// token swallow the whitespace on that side.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bb {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  explicit AddedVocabulary(std::vector<AddedToken> tokens);

  // One piece of text: either an added token (id >= 0) or plain text (id == -1).
  struct Segment {
    std::string_view text;
    int32_t id;
  };
  std::vector<Segment> split(std::string_view text) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_of_id_;
  // Token indices by first byte, longest content first: the first that matches is the longest.
  std::vector<size_t> by_first_byte_[256];
};

}  // namespace bb
