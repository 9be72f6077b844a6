// Host-side bfloat16 and float16 conversions (round to nearest even), used by
// casts, safetensors loading and the CPU reference of the CUDA path.
#pragma once

#include <cstdint>
#include <cstring>

namespace bb {

inline float bf16_to_float(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

}  // namespace bb
