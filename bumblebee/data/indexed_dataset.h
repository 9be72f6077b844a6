// IndexedDataset: read a Megatron-LM indexed dataset (PREFIX.bin + PREFIX.idx) through mmap.
//
// PREFIX.idx, little-endian, byte-compatible with Megatron-LM:
//   magic "MMIDIDX\0\0" (9 bytes) | version u64 = 1 | dtype code u8 |
//   sequence_count u64 | document_count u64 |
//   sequence_lengths int32[sequence_count] | sequence_pointers int64[sequence_count] |
//   document_indices int64[document_count]
// where document_indices[d] is the first sequence of document d, starting at 0
// and ending with sequence_count, so the header's document_count is the number
// of documents + 1. PREFIX.bin holds the tokens of all sequences back to back;
// sequence_pointers are byte offsets into it.
// Opening validates every field against the file sizes, so a wrong magic, a
// truncated file or a mismatched .bin is a bb::Error naming the file, never a
// wild read. The .idx arrays are not 8-byte aligned (the header is 34 bytes),
// so they are read with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bb {

// Megatron's dtype codes.
enum class IndexedDType : uint8_t {
  UInt8 = 1, Int8 = 2, Int16 = 3, Int32 = 4, Int64 = 5, Float64 = 6, Float32 = 7, UInt16 = 8,
};
const char* indexed_dtype_name(IndexedDType dt);   // "uint16", "int32", ...
size_t indexed_dtype_size(IndexedDType dt);
// The dtype Megatron picks for token ids: uint16 when vocab_size < 65500, else int32.
IndexedDType indexed_dtype_for_vocab(int64_t vocab_size);

inline constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

// A PREFIX.idx held in memory, validated on its own: magic, version, dtype, the
// counts against its size, document_indices, and sequence_pointers laid back to back.
struct IndexedDatasetIndex {
  IndexedDType dtype = IndexedDType::UInt16;
  int64_t sequence_count = 0, document_count = 0;
  int64_t bin_bytes = 0;   // the size PREFIX.bin must have
};
// `idx_path` names the index in errors. IndexedDataset's constructor validates through this.
IndexedDatasetIndex parse_indexed_dataset_index(const char* data, size_t size, const std::string& idx_path);

class IndexedDataset {
 public:
  // Opens PREFIX.idx and PREFIX.bin.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  IndexedDType dtype() const { return dtype_; }
  int64_t sequence_count() const { return sequence_count_; }
  int64_t document_count() const { return document_count_; }   // documents (the header stores this + 1)
  int64_t total_tokens() const { return total_tokens_; }

  int32_t sequence_length(int64_t sequence) const;
  int64_t sequence_pointer(int64_t sequence) const;   // byte offset into PREFIX.bin
  // First sequence of document d, for d in [0, document_count()]; entry document_count() is sequence_count().
  int64_t document_index(int64_t d) const;

  // Tokens [offset, offset + length) of `sequence`, widened to int64 into `out`.
  void read(int64_t sequence, int64_t offset, int64_t length, int64_t* out) const;
  // The same as a vector; length -1 reads to the end of the sequence.
  std::vector<int64_t> get(int64_t sequence, int64_t offset = 0, int64_t length = -1) const;

  // bb::Error naming the file, sequence, position and value of the first token
  // outside [0, vocab_size): data tokenized for another model.
  void check_vocab(int64_t vocab_size) const;

 private:
  struct Mapping;
  std::string prefix_;
  std::unique_ptr<Mapping> idx_, bin_;
  IndexedDType dtype_ = IndexedDType::UInt16;
  int64_t sequence_count_ = 0, document_count_ = 0, total_tokens_ = 0;
  const char* lengths_ = nullptr;    // into the .idx mapping
  const char* pointers_ = nullptr;
  const char* doc_indices_ = nullptr;
};

}  // namespace bb
