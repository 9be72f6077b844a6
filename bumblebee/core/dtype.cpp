// DType sizes and names.
#include "bumblebee/core/dtype.h"

#include "bumblebee/core/error.h"

namespace bb {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::BF16: case DType::F16: return 2;
    case DType::U8: return 1;
  }
  BB_FAIL("unknown dtype code ", int(dt));
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::F64: return "float64";
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
  }
  return "unknown";
}

DType dtype_from_name(const std::string& n) {
  if (n == "float64" || n == "f64" || n == "double") return DType::F64;
  if (n == "float32" || n == "f32" || n == "float") return DType::F32;
  if (n == "bfloat16" || n == "bf16") return DType::BF16;
  if (n == "float16" || n == "f16" || n == "half") return DType::F16;
  if (n == "int32" || n == "i32") return DType::I32;
  if (n == "int64" || n == "i64") return DType::I64;
  if (n == "uint8" || n == "u8") return DType::U8;
  BB_FAIL("unknown dtype '", n, "' (expected float64, float32, bfloat16, float16, int32, int64 or uint8)");
}

bool is_floating(DType dt) {
  return dt == DType::F64 || dt == DType::F32 || dt == DType::BF16 || dt == DType::F16;
}

}  // namespace bb
