// IndexedDataset: mmap of PREFIX.idx / PREFIX.bin, validation of the layout, token reads.
#include "bumblebee/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "bumblebee/core/error.h"
#include "bumblebee/core/input_file.h"

namespace bb {

const char* indexed_dtype_name(IndexedDType dt) {
  switch (dt) {
    case IndexedDType::UInt8: return "uint8";
    case IndexedDType::Int8: return "int8";
    case IndexedDType::Int16: return "int16";
    case IndexedDType::Int32: return "int32";
    case IndexedDType::Int64: return "int64";
    case IndexedDType::Float64: return "float64";
    case IndexedDType::Float32: return "float32";
    case IndexedDType::UInt16: return "uint16";
  }
  return "unknown";
}

size_t indexed_dtype_size(IndexedDType dt) {
  switch (dt) {
    case IndexedDType::UInt8:
    case IndexedDType::Int8: return 1;
    case IndexedDType::Int16:
    case IndexedDType::UInt16: return 2;
    case IndexedDType::Int32:
    case IndexedDType::Float32: return 4;
    case IndexedDType::Int64:
    case IndexedDType::Float64: return 8;
  }
  return 0;
}

IndexedDType indexed_dtype_for_vocab(int64_t vocab_size) {
  BB_CHECK(vocab_size > 0, "vocab size must be positive, got ", vocab_size);
  return vocab_size < 65500 ? IndexedDType::UInt16 : IndexedDType::Int32;
}

// A read-only mapping of a whole file (no mapping for an empty file).
struct IndexedDataset::Mapping {
  const char* data = nullptr;
  size_t size = 0;

  explicit Mapping(const std::string& path) {
    check_input_file(path, "indexed dataset file");
    const int fd = ::open(path.c_str(), O_RDONLY);
    BB_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      BB_FAIL("cannot stat ", path, ": ", std::strerror(err));
    }
    size = size_t(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      const int err = errno;
      ::close(fd);
      BB_CHECK(p != MAP_FAILED, "cannot mmap ", path, ": ", std::strerror(err));
      data = static_cast<const char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapping() {
    if (data) ::munmap(const_cast<char*>(data), size);
  }
};

namespace {

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool is_token_dtype(uint8_t code) {
  return code == 1 || code == 2 || code == 3 || code == 4 || code == 5 || code == 8;
}

}  // namespace

IndexedDatasetIndex parse_indexed_dataset_index(const char* p, size_t idx_size, const std::string& idx_path) {
  BB_CHECK(idx_size >= kIndexHeaderBytes, idx_path, ": truncated index: ", idx_size, " bytes, the header alone is ",
           kIndexHeaderBytes);
  BB_CHECK(std::memcmp(p, kIndexMagic, sizeof(kIndexMagic)) == 0, idx_path,
           ": not a Megatron indexed dataset index (magic is not MMIDIDX\\0\\0)");
  const auto version = load<uint64_t>(p + 9);
  BB_CHECK(version == kIndexVersion, idx_path, ": index version ", version, ", only version 1 is supported");
  const auto code = load<uint8_t>(p + 17);
  BB_CHECK(code >= 1 && code <= 8, idx_path, ": unknown dtype code ", int(code));
  BB_CHECK(is_token_dtype(code), idx_path, ": dtype ", indexed_dtype_name(IndexedDType(code)),
           " cannot hold token ids");
  IndexedDatasetIndex out;
  out.dtype = IndexedDType(code);
  const auto sequences = load<uint64_t>(p + 18);
  const auto doc_entries = load<uint64_t>(p + 26);
  // Bound the counts before multiplying so a hostile header cannot overflow the size arithmetic.
  BB_CHECK(sequences <= idx_size && doc_entries <= idx_size, idx_path, ": header claims ", sequences,
           " sequences and ", doc_entries, " document entries, more than a ", idx_size, "-byte index can hold");
  const size_t expected = kIndexHeaderBytes + sequences * (4 + 8) + doc_entries * 8;
  BB_CHECK(idx_size >= expected, idx_path, ": truncated index: ", idx_size, " bytes, but ", sequences,
           " sequences and ", doc_entries, " document entries need ", expected);
  BB_CHECK(idx_size == expected, idx_path, ": ", idx_size - expected, " unexpected bytes after the document indices",
           " (multimodal sequence modes are not supported)");
  BB_CHECK(doc_entries >= 1, idx_path, ": document_indices is empty (it must start with 0)");
  out.sequence_count = int64_t(sequences);
  out.document_count = int64_t(doc_entries) - 1;
  const char* lengths = p + kIndexHeaderBytes;
  const char* pointers = lengths + 4 * sequences;
  const char* doc_indices = pointers + 8 * sequences;
  auto document_index = [&](int64_t d) { return load<int64_t>(doc_indices + 8 * d); };

  BB_CHECK(document_index(0) == 0, idx_path, ": document_indices starts at ", document_index(0), ", not 0");
  for (int64_t d = 0; d < out.document_count; ++d)
    BB_CHECK(document_index(d) <= document_index(d + 1), idx_path, ": document_indices decrease at document ", d);
  BB_CHECK(document_index(out.document_count) == out.sequence_count, idx_path, ": document_indices ends at ",
           document_index(out.document_count), " but there are ", out.sequence_count, " sequences");

  const int64_t elem = int64_t(indexed_dtype_size(out.dtype));
  int64_t offset = 0;
  for (int64_t i = 0; i < out.sequence_count; ++i) {
    const auto len = load<int32_t>(lengths + 4 * i);
    const auto pointer = load<int64_t>(pointers + 8 * i);
    BB_CHECK(len >= 0, idx_path, ": sequence ", i, " has negative length ", len);
    BB_CHECK(pointer == offset, idx_path, ": sequence ", i, " starts at byte ", pointer,
             " of the .bin, expected ", offset, " (sequences are stored back to back)");
    offset += len * elem;
  }
  out.bin_bytes = offset;
  return out;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  idx_ = std::make_unique<Mapping>(idx_path);
  const IndexedDatasetIndex index = parse_indexed_dataset_index(idx_->data, idx_->size, idx_path);
  dtype_ = index.dtype;
  sequence_count_ = index.sequence_count;
  document_count_ = index.document_count;
  lengths_ = idx_->data + kIndexHeaderBytes;
  pointers_ = lengths_ + 4 * sequence_count_;
  doc_indices_ = pointers_ + 8 * sequence_count_;

  bin_ = std::make_unique<Mapping>(bin_path);
  const int64_t elem = int64_t(indexed_dtype_size(dtype_));
  const int64_t offset = index.bin_bytes;
  BB_CHECK(int64_t(bin_->size) == offset, bin_path, ": ", bin_->size, " bytes, but ", idx_path, " describes ", offset,
           " (", offset / elem, " ", indexed_dtype_name(dtype_), " tokens)",
           int64_t(bin_->size) < offset ? ": the .bin is truncated" : ": the .bin has extra bytes");
  total_tokens_ = offset / elem;
}

IndexedDataset::~IndexedDataset() = default;

int32_t IndexedDataset::sequence_length(int64_t sequence) const {
  BB_CHECK(sequence >= 0 && sequence < sequence_count_, prefix_, ": sequence ", sequence, " out of range [0, ",
           sequence_count_, ")");
  return load<int32_t>(lengths_ + 4 * sequence);
}

int64_t IndexedDataset::sequence_pointer(int64_t sequence) const {
  BB_CHECK(sequence >= 0 && sequence < sequence_count_, prefix_, ": sequence ", sequence, " out of range [0, ",
           sequence_count_, ")");
  return load<int64_t>(pointers_ + 8 * sequence);
}

int64_t IndexedDataset::document_index(int64_t d) const {
  BB_CHECK(d >= 0 && d <= document_count_, prefix_, ": document index ", d, " out of range [0, ", document_count_,
           "]");
  return load<int64_t>(doc_indices_ + 8 * d);
}

namespace {
template <typename T>
void widen(const char* src, int64_t n, int64_t* out) {
  const T* p = reinterpret_cast<const T*>(src);   // .bin offsets are multiples of sizeof(T) from a page boundary
  for (int64_t i = 0; i < n; ++i) out[i] = int64_t(p[i]);
}
}  // namespace

void IndexedDataset::read(int64_t sequence, int64_t offset, int64_t length, int64_t* out) const {
  const int64_t len = sequence_length(sequence);
  BB_CHECK(offset >= 0 && length >= 0 && offset + length <= len, prefix_, ": tokens [", offset, ", ", offset + length,
           ") out of range for sequence ", sequence, " of length ", len);
  if (length == 0) return;
  const char* src = bin_->data + sequence_pointer(sequence) + offset * int64_t(indexed_dtype_size(dtype_));
  switch (dtype_) {
    case IndexedDType::UInt8: widen<uint8_t>(src, length, out); break;
    case IndexedDType::Int8: widen<int8_t>(src, length, out); break;
    case IndexedDType::Int16: widen<int16_t>(src, length, out); break;
    case IndexedDType::UInt16: widen<uint16_t>(src, length, out); break;
    case IndexedDType::Int32: widen<int32_t>(src, length, out); break;
    case IndexedDType::Int64: widen<int64_t>(src, length, out); break;
    case IndexedDType::Float32:
    case IndexedDType::Float64: BB_FAIL(prefix_, ": float dtypes hold no tokens");
  }
}

std::vector<int64_t> IndexedDataset::get(int64_t sequence, int64_t offset, int64_t length) const {
  if (length < 0) length = sequence_length(sequence) - offset;
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(length, 0)));
  read(sequence, offset, length, out.data());
  return out;
}

void IndexedDataset::check_vocab(int64_t vocab_size) const {
  std::vector<int64_t> tokens;
  for (int64_t s = 0; s < sequence_count_; ++s) {
    tokens.resize(size_t(sequence_length(s)));
    read(s, 0, int64_t(tokens.size()), tokens.data());
    for (size_t t = 0; t < tokens.size(); ++t)
      BB_CHECK(tokens[t] >= 0 && tokens[t] < vocab_size, prefix_, ".bin: sequence ", s, " holds token ", tokens[t],
               " at position ", t, ", outside the model's vocabulary of ", vocab_size,
               " (was it tokenized for another model?)");
  }
}

}  // namespace bb
