// TensorBoardWriter: scalar summaries in TensorBoard event files, written without TensorFlow.
//
// An event file (events.out.tfevents.<unix time>.<host>) is a sequence of
// TFRecords: u64 payload length, masked CRC-32C of those 8 bytes, the payload,
// masked CRC-32C of the payload (all little-endian). Each payload is an Event
// protocol buffer, encoded here by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2"; every later one a
// summary. Fields holding their proto3 default (step 0) are left out, as
// protobuf's own encoder does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace bb::train {

struct ScalarValue {
  std::string tag;   // e.g. "train/loss"
  float value = 0;
};

// Event payloads (protobuf wire format) and their TFRecord frame.
std::string encode_file_version_event(double wall_time);
std::string encode_scalars_event(double wall_time, int64_t step, const std::vector<ScalarValue>& values);
std::string frame_tfrecord(const std::string& payload);

class TensorBoardWriter {
 public:
  // Creates a new event file in `dir` (which must exist), beside any earlier
  // ones, and writes its file_version record.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event holding all `values` at `step`, flushed so a live TensorBoard sees it.
  void add_scalars(int64_t step, const std::vector<ScalarValue>& values);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace bb::train
