// Event protobuf bytes, TFRecord framing and the event file as written (TensorBoard itself reads
// one in tests/tools/tensorboard_reads_events.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bumblebee/core/crc32c.h"
#include "bumblebee/train/tensorboard_writer.h"
#include "tests/data/data_test_support.h"

namespace {

using namespace bb::train;
using bb::masked_crc32c;

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(char(b));
  return s;
}

uint64_t u64_at(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | uint8_t(s[at + size_t(i)]);
  return v;
}

uint32_t u32_at(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | uint8_t(s[at + size_t(i)]);
  return v;
}

// wall_time 1.5 as field 1 (fixed64): tag 0x09 then the little-endian double 0x3FF8000000000000.
const std::string kWallTime15 = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F});

TEST(TensorBoardEvent, FileVersionEvent) {
  EXPECT_EQ(encode_file_version_event(1.5), kWallTime15 + bytes({0x1A, 13}) + "brain.Event:2");
}

TEST(TensorBoardEvent, ScalarEvent) {
  // Value{tag "a" (0x0A 1 'a'), simple_value 1.0f (0x15, 0x3F800000 LE)} is 8 bytes;
  // Summary{value (0x0A 8 ...)} is 10; Event adds step 7 (0x10 7) and summary (0x2A 10 ...).
  const std::string value = bytes({0x0A, 1, 'a', 0x15, 0, 0, 0x80, 0x3F});
  EXPECT_EQ(encode_scalars_event(1.5, 7, {{"a", 1.0f}}),
            kWallTime15 + bytes({0x10, 7, 0x2A, 10, 0x0A, 8}) + value);
}

TEST(TensorBoardEvent, MultiByteVarintsAndSeveralValues) {
  const std::string e = encode_scalars_event(1.5, 300, {{"train/loss", 2.0f}, {"valid/loss", -0.5f}});
  // 300 = 0b10_0101100 -> varint 0xAC 0x02.
  ASSERT_GE(e.size(), 12u);
  EXPECT_EQ(e.substr(9, 3), bytes({0x10, 0xAC, 0x02}));
  // Each value: 2 + 10 (tag) + 5 (float) = 17 bytes, framed as 0x0A 17; summary = 2 * 19 = 38.
  EXPECT_EQ(e.substr(12, 2), bytes({0x2A, 38}));
  EXPECT_EQ(e.substr(14, 4), bytes({0x0A, 17, 0x0A, 10}));
  EXPECT_EQ(e.substr(18, 10), "train/loss");
  EXPECT_EQ(e.substr(28, 5), bytes({0x15, 0, 0, 0, 0x40}));        // 2.0f
  EXPECT_EQ(e.substr(37, 10), "valid/loss");
  EXPECT_EQ(e.substr(47, 5), bytes({0x15, 0, 0, 0, 0xBF}));        // -0.5f
  EXPECT_EQ(e.size(), 52u);
  // Step 0 is proto3's default and is left out.
  EXPECT_EQ(encode_scalars_event(1.5, 0, {}), kWallTime15 + bytes({0x2A, 0}));
}

TEST(TensorBoardEvent, TfRecordFraming) {
  const std::string payload = "hello event";
  const std::string rec = frame_tfrecord(payload);
  ASSERT_EQ(rec.size(), 8 + 4 + payload.size() + 4);
  EXPECT_EQ(u64_at(rec, 0), payload.size());
  EXPECT_EQ(u32_at(rec, 8), masked_crc32c(rec.data(), 8));
  EXPECT_EQ(rec.substr(12, payload.size()), payload);
  EXPECT_EQ(u32_at(rec, 12 + payload.size()), masked_crc32c(payload.data(), payload.size()));
}

TEST(TensorBoardWriter, WritesFramedRecordsIntoANamedFile) {
  bb::test::TempDir dir;
  std::string path;
  {
    TensorBoardWriter w(dir.path().string());
    path = w.path();
    w.add_scalars(1, {{"train/loss", 7.5f}});
    w.add_scalars(2, {{"train/loss", 7.0f}, {"train/lr", 0.001f}});
  }
  EXPECT_TRUE(std::filesystem::path(path).filename().string().starts_with("events.out.tfevents."));
  const std::string file = bb::test::read_file(path);
  std::vector<std::string> payloads;
  for (size_t at = 0; at < file.size();) {
    ASSERT_LE(at + 12, file.size());
    const uint64_t n = u64_at(file, at);
    ASSERT_EQ(u32_at(file, at + 8), masked_crc32c(file.data() + at, 8));
    ASSERT_LE(at + 16 + n, file.size());
    payloads.push_back(file.substr(at + 12, n));
    EXPECT_EQ(u32_at(file, at + 12 + n), masked_crc32c(payloads.back().data(), n));
    at += 16 + n;
  }
  ASSERT_EQ(payloads.size(), 3u);
  EXPECT_NE(payloads[0].find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(payloads[1].substr(9, 2), bytes({0x10, 1}));
  EXPECT_NE(payloads[2].find("train/lr"), std::string::npos);
}

}  // namespace
