// safetensors reader (mmap + full header validation) and atomic writer.
#include "bumblebee/primitive/ckpt/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "bumblebee/core/input_file.h"

namespace bb {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is mapped without byte swapping");

namespace {

using json = nlohmann::json;

// A hostile header must not make us allocate or parse gigabytes; real headers of
// models with tens of thousands of tensors stay in the low megabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kMetadataKey = "__metadata__";

struct FormatDType {
  const char* name;
  size_t size;
  std::optional<DType> dtype;  // empty: valid in the format, but Tensor cannot hold it
};

// Every dtype of the safetensors format with a whole-byte element size. Sub-byte
// types (F4, F6_*) are left out, so files holding them are rejected as unknown.
constexpr FormatDType kFormatDTypes[] = {
    {"F64", 8, DType::F64},  {"F32", 4, DType::F32},  {"BF16", 2, DType::BF16},   {"F16", 2, DType::F16},
    {"I64", 8, DType::I64},  {"I32", 4, DType::I32},  {"U8", 1, DType::U8},       {"BOOL", 1, std::nullopt},
    {"I8", 1, std::nullopt}, {"I16", 2, std::nullopt}, {"U16", 2, std::nullopt},  {"U32", 4, std::nullopt},
    {"U64", 8, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
};

const FormatDType* find_format_dtype(const std::string& name) {
  for (const FormatDType& f : kFormatDTypes)
    if (name == f.name) return &f;
  return nullptr;
}

const char* format_name(DType dt) {
  for (const FormatDType& f : kFormatDTypes)
    if (f.dtype == dt) return f.name;
  BB_FAIL("dtype ", dtype_name(dt), " has no safetensors name");
}

// Owns one read-only file mapped privately (copy-on-write) into memory.
class Mapping {
 public:
  Mapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mapping() {
    if (addr_) munmap(addr_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* bytes() const { return static_cast<const char*>(addr_); }

 private:
  void* addr_;
  size_t size_;
};

std::shared_ptr<Mapping> map_file(const std::string& path, size_t* size) {
  check_input_file(path, "safetensors file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  BB_CHECK(fd >= 0, "safetensors file '", path, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    BB_FAIL("safetensors file '", path, "': cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    BB_FAIL("safetensors file '", path, "': not a regular file");
  }
  *size = size_t(st.st_size);
  // An empty file cannot be mapped; parse() reports it as truncated.
  if (*size == 0) {
    ::close(fd);
    return std::make_shared<Mapping>(nullptr, 0);
  }
  // Writable private pages let callers modify a loaded tensor in place; the file is never changed.
  void* addr = mmap(nullptr, *size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  BB_CHECK(addr != MAP_FAILED, "safetensors file '", path, "': mmap of ", *size, " bytes failed: ",
           std::strerror(err));
  return std::make_shared<Mapping>(addr, *size);
}

// Parses the header, rejecting repeated keys in any object: nlohmann keeps the last
// one silently, which would let two entries claim the same name.
json parse_header(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> open_objects;
  std::string repeated;
  auto on_event = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && repeated.empty()) repeated = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, on_event);
  } catch (const json::exception& e) {
    BB_FAIL("safetensors file '", path, "': header is not valid JSON: ", e.what());
  }
  BB_CHECK(repeated.empty(), "safetensors file '", path, "': header repeats the key '", repeated, "'");
  BB_CHECK(header.is_object(), "safetensors file '", path, "': header is a JSON ", header.type_name(),
           ", expected an object");
  return header;
}

// Reads a non-negative JSON integer, naming the field in the error.
uint64_t as_count(const json& v, const std::string& path, const std::string& name, const char* field) {
  BB_CHECK(!(v.is_number_integer() && !v.is_number_unsigned()), "safetensors file '", path, "': tensor '", name,
           "': ", field, " holds the negative value ", v.dump());
  BB_CHECK(v.is_number_unsigned(), "safetensors file '", path, "': tensor '", name, "': ", field,
           " holds ", v.dump(), ", expected a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  size_t file_size = 0;
  std::shared_ptr<Mapping> mapping = map_file(path, &file_size);
  const char* bytes = mapping->bytes();
  SafetensorsFile f = parse(std::move(mapping), bytes, file_size, path);
  f.file_mapped_ = true;
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<void> owner, const char* bytes, size_t file_size,
                                       const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::move(owner);
  BB_CHECK(file_size >= 8, "safetensors file '", path, "': truncated: ", file_size,
           " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);
  BB_CHECK(header_len <= kMaxHeaderBytes, "safetensors file '", path, "': header length ", header_len,
           " exceeds the limit of ", kMaxHeaderBytes, " bytes (corrupt or not a safetensors file)");
  BB_CHECK(header_len <= file_size - 8, "safetensors file '", path, "': header length ", header_len,
           " exceeds the ", file_size - 8, " bytes after the length field (truncated file?)");
  const size_t data_size = file_size - 8 - header_len;
  f.data_ = bytes + 8 + header_len;

  json header = parse_header(path, bytes + 8, bytes + 8 + header_len);
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == kMetadataKey) {
      BB_CHECK(v.is_object(), "safetensors file '", path, "': __metadata__ is a JSON ", v.type_name(),
               ", expected an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        BB_CHECK(m.value().is_string(), "safetensors file '", path, "': __metadata__ key '", m.key(),
                 "' holds ", m.value().dump(), ", expected a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    BB_CHECK(v.is_object(), "safetensors file '", path, "': tensor '", name, "': entry is a JSON ", v.type_name(),
             ", expected an object");
    for (const char* field : {"dtype", "shape", "data_offsets"})
      BB_CHECK(v.contains(field), "safetensors file '", path, "': tensor '", name, "': entry lacks '", field, "'");
    BB_CHECK(v["dtype"].is_string(), "safetensors file '", path, "': tensor '", name, "': dtype is ",
             v["dtype"].dump(), ", expected a string");
    Entry e;
    e.stored_dtype = v["dtype"].get<std::string>();
    const FormatDType* fd = find_format_dtype(e.stored_dtype);
    BB_CHECK(fd, "safetensors file '", path, "': tensor '", name, "': unknown dtype '", e.stored_dtype, "'");

    BB_CHECK(v["shape"].is_array(), "safetensors file '", path, "': tensor '", name, "': shape is ",
             v["shape"].dump(), ", expected an array");
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      uint64_t n = as_count(d, path, name, "shape");
      BB_CHECK(n <= uint64_t(INT64_MAX) && !__builtin_mul_overflow(numel, n, &numel), "safetensors file '", path,
               "': tensor '", name, "': shape ", v["shape"].dump(), " overflows 64 bits");
      e.shape.push_back(int64_t(n));
    }
    uint64_t expected_bytes = 0;
    BB_CHECK(!__builtin_mul_overflow(numel, uint64_t(fd->size), &expected_bytes), "safetensors file '", path,
             "': tensor '", name, "': shape ", v["shape"].dump(), " overflows 64 bits in bytes");

    const json& offsets = v["data_offsets"];
    BB_CHECK(offsets.is_array() && offsets.size() == 2, "safetensors file '", path, "': tensor '", name,
             "': data_offsets is ", offsets.dump(), ", expected [begin, end]");
    uint64_t begin = as_count(offsets[0], path, name, "data_offsets");
    uint64_t end = as_count(offsets[1], path, name, "data_offsets");
    BB_CHECK(begin <= end, "safetensors file '", path, "': tensor '", name, "': data_offsets [", begin, ", ", end,
             "] end before they begin");
    BB_CHECK(end <= data_size, "safetensors file '", path, "': tensor '", name, "': data_offsets [", begin, ", ",
             end, "] run past the ", data_size, "-byte data section (truncated file?)");
    BB_CHECK(end - begin == expected_bytes, "safetensors file '", path, "': tensor '", name, "': ", end - begin,
             " bytes stored, but ", e.stored_dtype, " ", shape_str(e.shape), " needs ", expected_bytes);
    e.begin = size_t(begin);
    e.end = size_t(end);
    f.entries_.emplace(name, std::move(e));
  }

  // The format requires the entries to tile the data section exactly.
  std::vector<const std::pair<const std::string, Entry>*> by_offset;
  for (const auto& kv : f.entries_) by_offset.push_back(&kv);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::pair(a->second.begin, a->second.end) < std::pair(b->second.begin, b->second.end);
  });
  size_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto* kv : by_offset) {
    const Entry& e = kv->second;
    BB_CHECK(e.begin >= covered, "safetensors file '", path, "': tensor '", kv->first, "' at bytes [", e.begin,
             ", ", e.end, ") overlaps tensor '", *previous, "' ending at byte ", covered);
    BB_CHECK(e.begin == covered, "safetensors file '", path, "': tensor '", kv->first, "' starts at byte ",
             e.begin, ", leaving a gap after byte ", covered);
    covered = e.end;
    previous = &kv->first;
  }
  BB_CHECK(covered == data_size, "safetensors file '", path, "': tensors cover ", covered, " of the ", data_size,
           " data bytes; the rest is not indexed by any tensor");
  return f;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

bool SafetensorsFile::has(const std::string& name) const { return entries_.count(name) != 0; }

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  BB_CHECK(it != entries_.end(), "safetensors file '", path_, "' has no tensor '", name, "'");
  return it->second;
}

const Shape& SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }

const std::string& SafetensorsFile::stored_dtype(const std::string& name) const {
  return entry(name).stored_dtype;
}

DType SafetensorsFile::dtype(const std::string& name) const {
  const Entry& e = entry(name);
  const FormatDType* fd = find_format_dtype(e.stored_dtype);
  BB_CHECK(fd->dtype.has_value(), "safetensors file '", path_, "': tensor '", name, "' is stored as ",
           e.stored_dtype, ", which bumblebee tensors cannot hold");
  return *fd->dtype;
}

size_t SafetensorsFile::nbytes(const std::string& name) const {
  const Entry& e = entry(name);
  return e.end - e.begin;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const Entry& e = entry(name);
  DType dt = dtype(name);
  char* p = const_cast<char*>(data_ + e.begin);
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dt) == 0)
    return Tensor::wrap(p, e.shape, dt, Device::cpu(), mapping_);
  Tensor t = Tensor::empty(e.shape, dt);
  std::memcpy(t.raw(), p, e.end - e.begin);
  return t;
}

void SafetensorsFile::drop_pages(const std::string& name) const {
  const Entry& e = entry(name);
  // parse()'s images may be heap memory, where MADV_DONTNEED would zero the bytes.
  if (!file_mapped_) return;
  // Whole pages inside the tensor only: a page it shares with a neighbour may
  // hold that neighbour's private (written) copy, which dropping would lose.
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data_ + e.begin) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_ + e.end) / page * page;
  if (end > begin)
    BB_CHECK(::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0, "safetensors file '",
             path_, "': dropping the pages of tensor '", name, "' failed: ", std::strerror(errno));
}

void write_file_atomically(const std::string& path, const std::vector<std::pair<const void*, size_t>>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BB_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    BB_FAIL("writing '", path, "': ", what, " failed: ", std::strerror(err));
  };
  for (const auto& [data, size] : pieces) {
    const char* p = static_cast<const char*>(data);
    size_t left = size;
    while (left > 0) {
      // One write() moves at most ~2 GiB on Linux; loop on short writes.
      ssize_t n = ::write(fd, p, std::min<size_t>(left, size_t(1) << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write");
      p += n;
      left -= size_t(n);
    }
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    BB_FAIL("writing '", path, "': close failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    BB_FAIL("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err));
  }
  // The rename is durable only once the folder entry is on disk.
  std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> host;
  host.reserve(tensors.size());
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    BB_CHECK(!name.empty(), "write_safetensors '", path, "': empty tensor name");
    BB_CHECK(name != kMetadataKey, "write_safetensors '", path, "': '", kMetadataKey,
             "' is reserved and cannot name a tensor");
    BB_CHECK(seen.insert(name).second, "write_safetensors '", path, "': tensor '", name, "' given twice");
    BB_CHECK(t.defined(), "write_safetensors '", path, "': tensor '", name, "' is undefined");
    host.emplace_back(name, t.to(Device::cpu()));
  }
  std::stable_sort(host.begin(), host.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
  });

  json header = json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : host) {
    header[name] = {{"dtype", format_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  const uint64_t header_len = header_text.size();

  std::vector<std::pair<const void*, size_t>> pieces;
  pieces.emplace_back(&header_len, 8);
  pieces.emplace_back(header_text.data(), header_text.size());
  for (const auto& [name, t] : host)
    if (t.nbytes() > 0) pieces.emplace_back(t.raw(), t.nbytes());
  write_file_atomically(path, pieces);
}

}  // namespace bb

namespace bb {

SafetensorsStreamWriter::SafetensorsStreamWriter(std::string path, std::map<std::string, std::string> metadata)
    : path_(std::move(path)), metadata_(std::move(metadata)) {
  data_path_ = path_ + ".data.tmp." + std::to_string(::getpid());
  data_fd_ = ::open(data_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BB_CHECK(data_fd_ >= 0, "cannot create '", data_path_, "': ", std::strerror(errno));
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (data_fd_ >= 0) ::close(data_fd_);
  if (!closed_) ::unlink(data_path_.c_str());
}

void SafetensorsStreamWriter::add(const std::string& name, const Tensor& t) {
  BB_CHECK(!closed_, "safetensors file '", path_, "': add('", name, "') after close");
  BB_CHECK(!name.empty() && name != kMetadataKey, "safetensors file '", path_, "': invalid tensor name '", name, "'");
  BB_CHECK(t.defined(), "safetensors file '", path_, "': tensor '", name, "' is undefined");
  const Tensor host = t.to(Device::cpu());
  const json entry = {{"dtype", format_name(host.dtype())},
                      {"shape", host.shape()},
                      {"data_offsets", {offset_, offset_ + host.nbytes()}}};
  if (header_entries_++ > 0) header_json_ += ',';
  header_json_ += json(name).dump() + ':' + entry.dump();
  const char* p = static_cast<const char*>(host.raw());
  size_t left = host.nbytes();
  while (left > 0) {
    ssize_t n = ::write(data_fd_, p, std::min<size_t>(left, size_t(1) << 30));
    if (n < 0 && errno == EINTR) continue;
    BB_CHECK(n > 0, "writing '", data_path_, "' (tensor '", name, "'): ", std::strerror(errno));
    p += n;
    left -= size_t(n);
  }
  offset_ += host.nbytes();
}

void SafetensorsStreamWriter::close() {
  BB_CHECK(!closed_, "safetensors file '", path_, "' closed twice");
  // Names are unique by construction of the callers; the reader re-checks on open.
  std::string header = "{";
  if (!metadata_.empty()) header += json(kMetadataKey).dump() + ':' + json(metadata_).dump() + (header_entries_ ? "," : "");
  header += header_json_ + "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  const uint64_t header_len = header.size();

  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  BB_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    BB_FAIL("writing '", path_, "': ", what, " failed: ", std::strerror(err));
  };
  if (::write(fd, &header_len, 8) != 8 || ::write(fd, header.data(), header.size()) != ssize_t(header.size()))
    fail("header write");
  loff_t in = 0;
  uint64_t left = offset_;
  while (left > 0) {
    ssize_t n = ::copy_file_range(data_fd_, &in, fd, nullptr, std::min<uint64_t>(left, uint64_t(1) << 30), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("copy_file_range");
    left -= uint64_t(n);
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    BB_FAIL("writing '", path_, "': close failed: ", std::strerror(errno));
  }
  ::close(data_fd_);
  data_fd_ = -1;
  ::unlink(data_path_.c_str());
  closed_ = true;
  BB_CHECK(::rename(tmp.c_str(), path_.c_str()) == 0, "cannot rename '", tmp, "' to '", path_, "': ",
           std::strerror(errno));
}

}  // namespace bb
