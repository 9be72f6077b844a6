// Event protobuf encoding, TFRecord framing and the event-file writer.
#include "bumblebee/train/tensorboard_writer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "bumblebee/core/error.h"
#include "bumblebee/core/crc32c.h"

namespace bb::train {

namespace {

// Protobuf wire types.
constexpr uint8_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(uint8_t(v)));
}

void put_tag(std::string& out, int field, uint8_t wire_type) { put_varint(out, uint64_t(field) << 3 | wire_type); }

template <typename Fixed>
void put_little_endian(std::string& out, Fixed bits) {
  for (size_t i = 0; i < sizeof(Fixed); ++i) out.push_back(char(uint8_t(bits >> (8 * i))));
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, kFixed64);
  put_little_endian(out, bits);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_tag(out, field, kFixed32);
  put_little_endian(out, bits);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_wall_time_and_step(std::string& out, double wall_time, int64_t step) {
  put_double(out, 1, wall_time);
  if (step != 0) {
    put_tag(out, 2, kVarint);
    put_varint(out, uint64_t(step));   // int64 is sent as its two's-complement bits
  }
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

std::string encode_file_version_event(double wall_time) {
  std::string out;
  put_wall_time_and_step(out, wall_time, 0);
  put_bytes(out, 3, "brain.Event:2");
  return out;
}

std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<ScalarValue>& values) {
  std::string summary;
  for (const ScalarValue& v : values) {
    std::string value;
    put_bytes(value, 1, v.tag);
    put_float(value, 2, v.value);
    put_bytes(summary, 1, value);
  }
  std::string out;
  put_wall_time_and_step(out, wall_time, step);
  put_bytes(out, 5, summary);
  return out;
}

std::string frame_tfrecord(const std::string& payload) {
  std::string out;
  std::string length;
  put_little_endian(length, uint64_t(payload.size()));
  out += length;
  put_little_endian(out, masked_crc32c(length.data(), length.size()));
  out += payload;
  put_little_endian(out, masked_crc32c(payload.data(), payload.size()));
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  const double t = now_seconds();
  const std::string base = dir + "/events.out.tfevents." + std::to_string(int64_t(t)) + "." + host_name();
  // A resumed run writes a new file beside the earlier ones (TensorBoard reads
  // them all); within the same second it takes the next free suffix, never
  // overwriting ("x": fail if the file exists).
  for (int n = 0;; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (file_ || errno != EEXIST) break;
  }
  BB_CHECK(file_, "cannot create TensorBoard event file ", path_, ": ", std::strerror(errno));
  write_record(encode_file_version_event(t));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<ScalarValue>& values) {
  write_record(encode_scalars_event(now_seconds(), step, values));
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const std::string record = frame_tfrecord(payload);
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0;
  BB_CHECK(ok, "cannot write TensorBoard event file ", path_, ": ", std::strerror(errno));
}

}  // namespace bb::train
