// CRC-32C against published check values (RFC 3720 appendix B.4), chunked checksums, and TFRecord's mask.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bumblebee/core/crc32c.h"

namespace {

using bb::crc32c;
using bb::crc32c_extend;
using bb::masked_crc32c;

TEST(Crc32c, KnownVectors) {
  const std::string check = "123456789";
  EXPECT_EQ(crc32c(check.data(), check.size()), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  std::vector<unsigned char> ascending(32), descending(32);
  for (int i = 0; i < 32; ++i) {
    ascending[size_t(i)] = static_cast<unsigned char>(i);
    descending[size_t(i)] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(descending.data(), descending.size()), 0x113FDB5Cu);
}

// Checksumming a file in chunks of any size gives the checksum of the whole.
TEST(Crc32c, ExtendOverChunksEqualsTheWhole) {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t chunk : {1, 3, 8, 13, 64, 999}) {
    uint32_t crc = 0;
    for (size_t at = 0; at < data.size(); at += chunk)
      crc = crc32c_extend(crc, data.data() + at, std::min(chunk, data.size() - at));
    EXPECT_EQ(crc, whole) << "chunk " << chunk;
  }
  EXPECT_EQ(crc32c_extend(crc32c("1234", 4), "56789", 5), 0xE3069283u);
}

TEST(Crc32c, MaskRotatesAndOffsets) {
  const std::string check = "123456789";
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8 mod 2^32
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c("", 0), 0xA282EAD8u);
}

}  // namespace
