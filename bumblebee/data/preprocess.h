// preprocess_jsonl: tokenize a JSONL corpus into a Megatron indexed dataset (what bb-data runs).
//
// Each line is a JSON object; its `key` field (a string) is one document.
// Lines are tokenized by `workers` threads in chunks and written in input
// order, so the output does not depend on the worker count. A line that is
// not an object with a string `key` is malformed: reported with its line
// number, then skipped or fatal. Blank lines are ignored. The dataset is
// uint16 when the tokenizer has fewer than 65500 ids, else int32, and appears
// atomically (see IndexedDatasetBuilder) only when the whole input succeeded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "bumblebee/data/indexed_dataset.h"
#include "bumblebee/data/tokenizer.h"

namespace bb {

struct PreprocessOptions {
  std::string input;                        // FILE.jsonl
  std::string output_prefix;                // writes PREFIX.bin and PREFIX.idx
  std::string key = "text";
  int64_t workers = 1;
  bool append_eod = true;                   // end every document with eod_token
  std::string eod_token = "<|endoftext|>";
  bool add_special_tokens = true;           // the tokenizer's template (e.g. Llama 3's BOS)
  bool skip_malformed = false;              // false: the first malformed line is a bb::Error
};

struct PreprocessProgress {
  int64_t bytes_read = 0, total_bytes = 0, documents = 0, tokens = 0;
  double seconds = 0;
};

struct PreprocessStats {
  int64_t documents = 0, tokens = 0, bytes = 0, malformed_lines = 0, empty_documents = 0;
  double seconds = 0;
  IndexedDType dtype = IndexedDType::UInt16;
};

// on_progress runs after each chunk; on_warning gets one line per skipped malformed line.
PreprocessStats preprocess_jsonl(const Tokenizer& tokenizer, const PreprocessOptions& options,
                                 const std::function<void(const PreprocessProgress&)>& on_progress,
                                 const std::function<void(const std::string&)>& on_warning);

}  // namespace bb
