// Leftmost-longest matching of added tokens, with lstrip/rstrip whitespace absorption.
#include "bumblebee/data/added_vocabulary.h"

#include <algorithm>

#include "bumblebee/core/error.h"
#include "bumblebee/data/utf8.h"

namespace bb {

namespace {

// Unicode White_Space (what HF's lstrip/rstrip strip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point of the UTF-8 character occupying text[begin, end).
char32_t code_point(std::string_view text, size_t begin, size_t end) {
  const std::u32string cps = utf8::decode(text.substr(begin, end - begin), "text around an added token");
  return cps.size() == 1 ? cps[0] : 0;
}

// Start of the UTF-8 character that ends at `end` (no earlier than `floor`).
size_t previous_char_start(std::string_view text, size_t end, size_t floor) {
  size_t b = end - 1;
  while (b > floor && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
  return b;
}

}  // namespace

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    BB_CHECK(!tokens_[i].content.empty(), "added token ", tokens_[i].id, " has empty content");
    index_of_id_[tokens_[i].id] = i;
    by_first_byte_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = index_of_id_.find(id);
  return it == index_of_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return &t;
  return nullptr;
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const AddedToken* hit = nullptr;
    for (size_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      if (text.compare(pos, tokens_[i].content.size(), tokens_[i].content) == 0) {
        hit = &tokens_[i];
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    size_t start = pos, end = pos + hit->content.size();
    while (hit->lstrip && start > plain_start) {
      const size_t prev = previous_char_start(text, start, plain_start);
      if (!is_white_space(code_point(text, prev, start))) break;
      start = prev;
    }
    while (hit->rstrip && end < text.size()) {
      const size_t next = std::min(text.size(), end + utf8::sequence_length(static_cast<unsigned char>(text[end])));
      if (!is_white_space(code_point(text, end, next))) break;
      end = next;
    }
    if (start > plain_start) out.push_back({text.substr(plain_start, start - plain_start), -1});
    out.push_back({text.substr(start, end - start), hit->id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
  return out;
}

}  // namespace bb
