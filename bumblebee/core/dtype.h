// Element types a Tensor can hold, their sizes and names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace bb {

enum class DType : uint8_t { F64, F32, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType dt);
const char* dtype_name(DType dt);          // "float64", "float32", "bfloat16", ...
DType dtype_from_name(const std::string& name);  // accepts the names above and "f32"-style short ones
bool is_floating(DType dt);

// Compile-time map from a C++ element type to its DType.
template <typename T> struct dtype_of;
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };

}  // namespace bb
