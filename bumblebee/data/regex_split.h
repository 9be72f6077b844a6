// RegexSplitter: the Split pre-tokenizer step (behavior "Isolated") over PCRE2.
//
// tokenizer.json split patterns use Unicode classes (\p{L}, \p{N}, \s) and
// look-ahead (\s+(?!\S)), so they run on PCRE2 in UTF + UCP mode: \s, \d and
// \w then follow Unicode properties as in the Oniguruma engine HF uses.
// A compiled pattern is shared by all threads; each match call brings its own
// match data, so one splitter serves many tokenizing workers.
// A build without PCRE2 headers (BB_WITH_PCRE2 unset) still compiles every
// caller; constructing a splitter there is a bb::Error saying so.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bb {

class RegexSplitter {
 public:
  // `literal` treats `pattern` as plain text (tokenizer.json's {"String": ...}).
  RegexSplitter(const std::string& pattern, bool literal);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` to `pieces`: every match, and every non-empty
  // gap between matches, in order (they tile the text). `text` must be valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  const std::string& pattern() const { return pattern_; }
  // False in a build without PCRE2.
  static bool available();

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace bb
