// The expert GEMM kernels of grouped_gemm_sm90.cu by role, one translation
// unit each (grouped_gemm_sm90_fprop.cu, _dgrad.cu, _wgrad.cu): the CUTLASS
// kernels are the build's longest units, and two a unit compile side by side.
#pragma once

#include <vector>

#include "bumblebee/core/dtype.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90.h"

namespace bb::cuda::expert_gemm {

// y = x W^T; `small`: the experts average few rows (clusters of 1x1, see grouped_gemm_sm90.cu).
void run_fprop(const std::vector<ExpertGemmGroup>& groups, bool small, float alpha, float beta);
// dx = dy W; `small` as above.
void run_dgrad(const std::vector<ExpertGemmGroup>& groups, bool small, float alpha, float beta);
// dW = dy^T x into a float32 or bfloat16 d.
void run_wgrad(const std::vector<ExpertGemmGroup>& groups, DType d, float alpha, float beta);

}  // namespace bb::cuda::expert_gemm
