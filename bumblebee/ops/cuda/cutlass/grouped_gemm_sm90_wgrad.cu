// The weight-gradient expert GEMM (dW = dy^T x) of grouped_gemm_sm90.cu into
// float32 or bfloat16. Compiled for sm_90a alone.
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_roles.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_run.cuh"

namespace bb::cuda::expert_gemm {

void run_wgrad(const std::vector<ExpertGemmGroup>& groups, DType d, float alpha, float beta) {
  if (d == DType::F32) return run<Kinds<LibraryConfig>::WeightGrad>(groups, alpha, beta);
  return run<Kinds<LibraryConfig>::WeightGradBf16>(groups, alpha, beta);
}

}  // namespace bb::cuda::expert_gemm
