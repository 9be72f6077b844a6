// Table-driven CRC-32C, slicing by 8: eight table lookups per 8 bytes, so
// checksumming a multi-gigabyte checkpoint shard costs seconds, not minutes.
#include "bumblebee/core/crc32c.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <vector>
#include <cstring>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0] is the byte-at-a-time table; tables[k][b] is the CRC of byte b
// followed by k zero bytes, which lets eight bytes be folded in at once.
Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
  return t;
}

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  static const Tables t = make_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    // Little-endian assembly by hand, so the result does not depend on the host's byte order.
    const uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
        t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; size > 0; --size, ++p) c = t[0][(c ^ *p) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t size) { return crc32c_extend(0, data, size); }

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

FileChecksum checksum_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  BB_CHECK(f, "cannot read ", path, ": ", std::strerror(errno));
  std::vector<char> buf(1 << 20);
  FileChecksum s;
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const size_t n = size_t(f.gcount());
    s.crc32c = crc32c_extend(s.crc32c, buf.data(), n);
    s.bytes += n;
  }
  BB_CHECK(f.eof(), "cannot read ", path, ": ", std::strerror(errno));
  return s;
}

std::string crc32c_hex(uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", crc);
  return buf;
}

}  // namespace bb
