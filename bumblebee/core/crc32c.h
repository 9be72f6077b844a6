// CRC-32C (Castagnoli): the checksum of TFRecord framing in TensorBoard event
// files and of every file in a training checkpoint's manifest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bb {

// CRC-32C of `size` bytes (reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF).
uint32_t crc32c(const void* data, size_t size);

// The CRC-32C of the bytes checksummed to `crc` followed by these `size` bytes,
// so a file can be checksummed in chunks: crc32c(a + b) == crc32c_extend(crc32c(a), b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

// TFRecord's masked form: rotate right by 15 bits and add 0xA282EAD8, so that a
// CRC stored inside checksummed data does not checksum to a fixed value.
uint32_t masked_crc32c(const void* data, size_t size);

// The size and CRC-32C of a whole file, read in 1 MiB chunks (host memory
// stays bounded whatever the file's size); an error names the file.
struct FileChecksum {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};
FileChecksum checksum_file(const std::string& path);

// "0x1234ABCD", as checkpoint manifests and errors print a CRC.
std::string crc32c_hex(uint32_t crc);

}  // namespace bb
