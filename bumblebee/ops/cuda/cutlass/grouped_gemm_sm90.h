// The sm_90a grouped GEMM of the MoE experts, built on CUTLASS 3's Hopper
// ptr-array kernel (TMA loads, wgmma, one persistent launch for all groups).
// Compiled only when CMake finds the CUTLASS headers (BB_WITH_CUTLASS); the
// cuBLAS path of grouped_gemm.cu is the fallback and the choice is made there.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/dtype.h"

namespace bb::cuda {

// The three expert GEMMs, row-major d [m, n] = alpha * op(a) op(b) + beta * d:
//   Forward     y = x W^T:   a [m, k], b [n, k]
//   InputGrad   dx = dy W:   a [m, k], b [k, n]
//   WeightGrad  dW = dy^T x: a [k, m], b [k, n]
// All bfloat16 inputs with fp32 accumulation; d bfloat16, or float32 for WeightGrad.
enum class ExpertGemm { Forward, InputGrad, WeightGrad };

// One group: the sizes in the row-major terms above and the packed matrices.
struct ExpertGemmGroup {
  int m, n, k;
  const void* a;
  const void* b;
  void* d;
};

// Whether the kernel takes this GEMM: bfloat16 inputs, d bfloat16 (or float32
// for WeightGrad). The caller checks the sizes (n, k and the leading
// dimensions multiples of 8) and 16-byte aligned pointers.
bool cutlass_grouped_gemm_takes(ExpertGemm kind, DType ab, DType d);

// One launch for all `groups` (none empty) on the current stream of the
// current device. Problem sizes, pointers and strides go to the device in one
// asynchronous copy from pinned memory; the call does not wait for the GPU.
void cutlass_grouped_gemm(ExpertGemm kind, DType d, const std::vector<ExpertGemmGroup>& groups, float alpha,
                          float beta);

}  // namespace bb::cuda
