// CRC-32C against published check values (RFC 3720 appendix B.4) and TFRecord's mask.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bumblebee/train/crc32c.h"

namespace {

using bb::train::crc32c;
using bb::train::masked_crc32c;

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

TEST(Crc32c, MaskRotatesAndOffsets) {
  const std::string check = "123456789";
  // ((0xE3069283 >> 15) | (0xE3069283 << 17)) + 0xA282EAD8 mod 2^32
  EXPECT_EQ(masked_crc32c(check.data(), check.size()), 0xC78AB0E5u);
  EXPECT_EQ(masked_crc32c("", 0), 0xA282EAD8u);
}

}  // namespace
