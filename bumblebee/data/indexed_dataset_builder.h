// IndexedDatasetBuilder: write a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx).
//
// Tokens stream to a temporary PREFIX.bin.tmp.<pid> as sequences arrive; only
// the lengths stay in memory. finalize() writes the index to a temporary name,
// syncs both, and renames them into place, .bin first and .idx last (after
// removing any old .idx), so a reader never pairs a new .idx with a partial
// .bin. A builder destroyed before finalize() removes its temporary files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "bumblebee/data/indexed_dataset.h"

namespace bb {

class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, IndexedDType dtype);
  ~IndexedDatasetBuilder();
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence of the current document. A token that does not fit the dtype is a bb::Error.
  void add_sequence(std::span<const int64_t> tokens);
  void add_sequence(std::span<const int32_t> tokens);
  // Closes the current document (Megatron: one document may hold several sequences).
  void end_document();
  // A one-sequence document: add_sequence + end_document.
  void add_document(std::span<const int64_t> tokens);
  void add_document(std::span<const int32_t> tokens);
  // Writes PREFIX.idx and moves both files into place. Every sequence must belong to an ended document.
  void finalize();

  int64_t sequence_count() const { return int64_t(sequence_lengths_.size()); }
  int64_t document_count() const { return int64_t(document_indices_.size()) - 1; }
  int64_t total_tokens() const { return total_tokens_; }
  IndexedDType dtype() const { return dtype_; }

 private:
  template <typename T>
  void append(std::span<const T> tokens);
  void discard_temporaries();

  std::string prefix_, bin_tmp_, idx_tmp_;
  IndexedDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<char> buffer_;
  int64_t total_tokens_ = 0;
  bool finalized_ = false;
};

}  // namespace bb
