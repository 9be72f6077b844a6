// IndexedDatasetBuilder: token conversion with range checks, index serialization, atomic publish.
#include "bumblebee/data/indexed_dataset_builder.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

template <typename Out>
void put(std::vector<char>& buf, Out v) {
  const size_t at = buf.size();
  buf.resize(at + sizeof(Out));
  std::memcpy(buf.data() + at, &v, sizeof(Out));
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  BB_CHECK(std::fwrite(data, 1, n, f) == n, "writing ", path, " failed: ", std::strerror(errno));
}

void close_synced(std::FILE* f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  BB_CHECK(ok && closed, "writing ", path, " failed: ", std::strerror(err));
}

template <typename Stored, typename T>
void convert(std::span<const T> tokens, std::vector<char>& buf, const std::string& prefix, int64_t document) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = int64_t(tokens[i]);
    BB_CHECK(t >= int64_t(std::numeric_limits<Stored>::min()) && t <= int64_t(std::numeric_limits<Stored>::max()),
             prefix, ": token ", t, " at position ", i, " of document ", document, " does not fit the dataset dtype");
    put(buf, Stored(t));
  }
}

}  // namespace

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, IndexedDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  BB_CHECK(dtype != IndexedDType::Float32 && dtype != IndexedDType::Float64, prefix,
           ": a token dataset needs an integer dtype, not ", indexed_dtype_name(dtype));
  const std::string tag = ".tmp." + std::to_string(::getpid());
  bin_tmp_ = prefix + ".bin" + tag;
  idx_tmp_ = prefix + ".idx" + tag;
  bin_ = std::fopen(bin_tmp_.c_str(), "wb");
  BB_CHECK(bin_ != nullptr, "cannot create ", bin_tmp_, ": ", std::strerror(errno));
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (!finalized_) discard_temporaries();
}

void IndexedDatasetBuilder::discard_temporaries() {
  if (bin_) std::fclose(bin_);
  bin_ = nullptr;
  std::remove(bin_tmp_.c_str());
  std::remove(idx_tmp_.c_str());
}

template <typename T>
void IndexedDatasetBuilder::append(std::span<const T> tokens) {
  BB_CHECK(!finalized_, prefix_, ": add after finalize");
  BB_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), prefix_, ": a sequence of ", tokens.size(),
           " tokens exceeds the int32 lengths of the index");
  buffer_.clear();
  const int64_t document = document_count();
  switch (dtype_) {
    case IndexedDType::UInt8: convert<uint8_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::Int8: convert<int8_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::Int16: convert<int16_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::UInt16: convert<uint16_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::Int32: convert<int32_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::Int64: convert<int64_t>(tokens, buffer_, prefix_, document); break;
    case IndexedDType::Float32:
    case IndexedDType::Float64: BB_FAIL(prefix_, ": float dtypes hold no tokens");
  }
  write_all(bin_, buffer_.data(), buffer_.size(), bin_tmp_);
  sequence_lengths_.push_back(int32_t(tokens.size()));
  total_tokens_ += int64_t(tokens.size());
}

void IndexedDatasetBuilder::add_sequence(std::span<const int64_t> tokens) { append(tokens); }
void IndexedDatasetBuilder::add_sequence(std::span<const int32_t> tokens) { append(tokens); }

void IndexedDatasetBuilder::end_document() { document_indices_.push_back(sequence_count()); }

void IndexedDatasetBuilder::add_document(std::span<const int64_t> tokens) {
  append(tokens);
  end_document();
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
  append(tokens);
  end_document();
}

void IndexedDatasetBuilder::finalize() {
  BB_CHECK(!finalized_, prefix_, ": finalize called twice");
  BB_CHECK(document_indices_.back() == sequence_count(), prefix_, ": ", sequence_count() - document_indices_.back(),
           " sequences were added after the last end_document()");
  std::FILE* bin = bin_;
  bin_ = nullptr;
  close_synced(bin, bin_tmp_);

  std::vector<char> idx;
  idx.reserve(kIndexHeaderBytes + sequence_lengths_.size() * 12 + document_indices_.size() * 8);
  idx.insert(idx.end(), kIndexMagic, kIndexMagic + sizeof(kIndexMagic));
  put(idx, kIndexVersion);
  put(idx, uint8_t(dtype_));
  put(idx, uint64_t(sequence_lengths_.size()));
  put(idx, uint64_t(document_indices_.size()));
  for (int32_t len : sequence_lengths_) put(idx, len);
  const int64_t elem = int64_t(indexed_dtype_size(dtype_));
  int64_t pointer = 0;
  for (int32_t len : sequence_lengths_) {
    put(idx, pointer);
    pointer += len * elem;
  }
  for (int64_t d : document_indices_) put(idx, d);

  std::FILE* f = std::fopen(idx_tmp_.c_str(), "wb");
  BB_CHECK(f != nullptr, "cannot create ", idx_tmp_, ": ", std::strerror(errno));
  write_all(f, idx.data(), idx.size(), idx_tmp_);
  close_synced(f, idx_tmp_);

  const std::string bin_path = prefix_ + ".bin", idx_path = prefix_ + ".idx";
  std::remove(idx_path.c_str());
  BB_CHECK(std::rename(bin_tmp_.c_str(), bin_path.c_str()) == 0, "cannot move ", bin_tmp_, " to ", bin_path, ": ",
           std::strerror(errno));
  BB_CHECK(std::rename(idx_tmp_.c_str(), idx_path.c_str()) == 0, "cannot move ", idx_tmp_, " to ", idx_path, ": ",
           std::strerror(errno));
  finalized_ = true;
}

}  // namespace bb
