// RegexSplitter over PCRE2 (JIT-compiled when the library supports it); without PCRE2, one that refuses to build.
#include "bumblebee/data/regex_split.h"

#include "bumblebee/core/error.h"

#ifdef BB_WITH_PCRE2

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bumblebee/data/utf8.h"

namespace bb {

bool RegexSplitter::available() { return true; }

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Each thread keeps one JIT stack larger than PCRE2's 32 KiB default, so long
// whitespace runs under \s+(?!\S) do not exhaust it.
struct ThreadJit {
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  ThreadJit() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~ThreadJit() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

}  // namespace

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::string& pattern, bool literal)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL admits no UCP bit; a literal has no classes for it to affect anyway.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error,
                                  &offset, nullptr);
  BB_CHECK(compiled_->code != nullptr, "tokenizer split pattern '", pattern, "' does not compile at offset ", offset,
           ": ", pcre2_message(error));
  // A JIT failure (no JIT on this platform) only costs speed: the interpreter gives the same matches.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  thread_local ThreadJit jit;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), &pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0, pos = 0;
  uint32_t options = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), pos, options, match.get(), jit.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    BB_CHECK(rc >= 0, "tokenizer split pattern '", pattern_, "' failed at byte ", pos, ": ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    const size_t start = ov[0], end = ov[1];
    if (end == start) {
      // An empty match splits nothing; step over one character and search again.
      if (start >= text.size()) break;
      pos = start + utf8::sequence_length(static_cast<unsigned char>(text[start]));
      options = PCRE2_NO_UTF_CHECK;
      continue;
    }
    if (start > gap_start) pieces.push_back(text.substr(gap_start, start - gap_start));
    pieces.push_back(text.substr(start, end - start));
    gap_start = pos = end;
    // The whole subject was UTF-checked on the first call; later calls need not repeat it.
    options = PCRE2_NO_UTF_CHECK;
  }
  if (gap_start < text.size()) pieces.push_back(text.substr(gap_start));
}

}  // namespace bb

#else

namespace bb {

struct RegexSplitter::Compiled {};

bool RegexSplitter::available() { return false; }

RegexSplitter::RegexSplitter(const std::string& pattern, bool) : pattern_(pattern) {
  BB_FAIL("this build has no PCRE2, which tokenizer split patterns need: install libpcre2-dev and re-run cmake");
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::split(std::string_view, std::vector<std::string_view>&) const {
  BB_FAIL("this build has no PCRE2 (install libpcre2-dev and re-run cmake)");
}

}  // namespace bb

#endif  // BB_WITH_PCRE2
