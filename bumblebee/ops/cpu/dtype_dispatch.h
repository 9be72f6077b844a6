// Helpers shared by the CPU kernels: instantiate a kernel for the tensor's
// floating dtype, and read an int32/int64 index tensor as int64.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/core/tensor.h"

namespace bb::cpu {

// Calls fn(T{}) with T = double or float; use `using T = decltype(tag);` inside.
template <typename Fn>
void visit_float(DType dt, const char* op, Fn&& fn) {
  switch (dt) {
    case DType::F64: fn(double{}); return;
    case DType::F32: fn(float{}); return;
    default: BB_FAIL(op, ": the CPU backend computes in float32 or float64, got ", dtype_name(dt));
  }
}

// Index tensors (token ids, labels, positions) are small next to the data
// they index, so a copy to int64 keeps every kernel free of a second template.
inline std::vector<int64_t> read_indices(const Tensor& ids, const char* op) {
  std::vector<int64_t> out(size_t(ids.numel()));
  if (ids.dtype() == DType::I64) {
    const int64_t* p = ids.data<int64_t>();
    out.assign(p, p + ids.numel());
  } else if (ids.dtype() == DType::I32) {
    const int32_t* p = ids.data<int32_t>();
    out.assign(p, p + ids.numel());
  } else {
    BB_FAIL(op, ": index tensor must be int32 or int64, got ", dtype_name(ids.dtype()));
  }
  return out;
}

}  // namespace bb::cpu
