// safetensors files: a validating, memory-mapped reader and an atomic writer.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// then the tensor bytes, with offsets relative to the start of that data.
// The header is never trusted: open() checks every entry (known dtype,
// non-negative shape, offsets inside the data, size == numel * element size,
// entries covering the data contiguously without overlap or holes) and
// rejects the file with a bb::Error naming the file and the tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bumblebee/core/tensor.h"

namespace bb {

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // Validates a safetensors image held in memory, as open() does for the file it maps:
  // bytes [bytes, bytes + size) must stay valid while `owner` lives (tensors from get()
  // share it). `source` names the image in errors.
  static SafetensorsFile parse(std::shared_ptr<void> owner, const char* bytes, size_t size,
                               const std::string& source);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const;
  const Shape& shape(const std::string& name) const;
  // The stored dtype as the format spells it ("BF16", "F8_E4M3", ...).
  const std::string& stored_dtype(const std::string& name) const;
  // The stored dtype as a bb::DType; a bb::Error for format dtypes Tensor cannot hold (BOOL, I8, F8_*, ...).
  DType dtype(const std::string& name) const;
  size_t nbytes(const std::string& name) const;
  // A host tensor in the stored dtype. It views the mapped file (no copy) when the
  // bytes are aligned to the element size, which write_safetensors guarantees; other
  // files get a copy. The mapping is private copy-on-write: writing into the tensor
  // never changes the file, and the tensor keeps the mapping alive.
  Tensor get(const std::string& name) const;
  // Hands the file pages of tensor `name` that this process has touched back to
  // the page cache (madvise MADV_DONTNEED), so they leave its resident set
  // (RssFile); a later read faults them in from the file again. A loader calls
  // it once it has copied what it needs, so reading a checkpoint a tensor at a
  // time keeps at most one tensor's pages resident. Writes made through a view
  // of this tensor are lost (the view reads the file again). No effect on
  // parse()'s images, which may not be file mappings.
  void drop_pages(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    std::string stored_dtype;
    Shape shape;
    size_t begin = 0;  // bytes from the start of the data section
    size_t end = 0;
  };
  const Entry& entry(const std::string& name) const;

  std::string path_;
  std::shared_ptr<void> mapping_;
  const char* data_ = nullptr;  // start of the data section inside the mapping
  bool file_mapped_ = false;    // mapping_ is open()'s mmap of the file
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (any device; copied to host) to `path`. The file is written as
// "<path>.tmp.<pid>", fsync'ed and renamed over `path`, so an existing file is never
// left half-written. Header keys are sorted by name (JSON object order); the data is
// laid out by element size, largest first, then in the given order, so every tensor
// starts aligned to its element size (the header is space-padded to a multiple of 8)
// and readers can map it without copying. Names must be unique and non-empty.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes one safetensors file a tensor at a time, so a file of any size needs
// host memory for one tensor only: add() appends the tensor's bytes to a data
// file beside `path`; close() writes the header and then copies the data in
// the kernel (copy_file_range) into "<path>.tmp.<pid>", fsyncs and renames it
// over `path`. Tensors keep the order they were added in (mixed element sizes
// may then be unaligned, which readers handle by copying). Destroying an
// unclosed writer removes its temporary files and leaves `path` untouched.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(std::string path, std::map<std::string, std::string> metadata);
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  void add(const std::string& name, const Tensor& t);   // any device; copied to host
  uint64_t data_bytes() const { return offset_; }
  bool empty() const { return header_entries_ == 0; }
  void close();

 private:
  std::string path_, data_path_;
  std::map<std::string, std::string> metadata_;
  std::string header_json_;   // the entries so far, without the enclosing braces
  size_t header_entries_ = 0;
  uint64_t offset_ = 0;
  int data_fd_ = -1;
  bool closed_ = false;
};

// Shared by the safetensors and HF checkpoint writers: writes the byte ranges `pieces`,
// in order, to "<path>.tmp.<pid>", fsyncs it, renames it over `path` and fsyncs the
// folder. On failure the temporary file is removed and `path` is untouched.
void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces);

}  // namespace bb
