// The input-gradient expert GEMM (dx = dy W) of grouped_gemm_sm90.cu, both
// cluster configurations. Compiled for sm_90a alone.
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_roles.h"
#include "bumblebee/ops/cuda/cutlass/grouped_gemm_sm90_run.cuh"

namespace bb::cuda::expert_gemm {

void run_dgrad(const std::vector<ExpertGemmGroup>& groups, bool small, float alpha, float beta) {
  if (small) return run<Kinds<SmallExpertConfig>::InputGrad>(groups, alpha, beta);
  return run<Kinds<LibraryConfig>::InputGrad>(groups, alpha, beta);
}

}  // namespace bb::cuda::expert_gemm
