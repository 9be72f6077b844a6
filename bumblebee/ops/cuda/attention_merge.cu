// The log-sum-exp merge of ring attention: folds one step's partial attention
// (out bfloat16 [T, H, D], lse float32 [T, H]) into the running result.
//
// One thread per (row, head) pair walks its D columns: the weights are two
// exponentials per row, and D (the v head dim, which in multi-head latent
// attention differs from the q/k one) is at most 256, so the simple loop is
// memory bound like any elementwise op.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void attention_merge_kernel(bf16* __restrict__ out, float* __restrict__ lse,
                                       const bf16* __restrict__ part_out, const float* __restrict__ part_lse,
                                       int64_t rows, int64_t head_dim) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const float a = lse[r], b = part_lse[r];
    const float m = fmaxf(a, b);
    if (m == -INFINITY) continue;   // neither part saw a key: keep out and lse
    const float merged = m + logf(expf(a - m) + expf(b - m));
    const float wa = expf(a - merged), wb = expf(b - merged);
    for (int64_t d = 0; d < head_dim; ++d) {
      const int64_t i = r * head_dim + d;
      out[i] = __float2bfloat16(wa * __bfloat162float(out[i]) + wb * __bfloat162float(part_out[i]));
    }
    lse[r] = merged;
  }
}

}  // namespace

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  const char* op = "attention_merge";
  check_cuda(out, op, "out");
  check_cuda_same(out, lse, op, "lse");
  check_cuda_same(out, part_out, op, "part_out");
  check_cuda_same(out, part_lse, op, "part_lse");
  BB_CHECK(out.dtype() == DType::BF16 && part_out.dtype() == DType::BF16, op, ": out and part_out must be bfloat16");
  BB_CHECK(lse.dtype() == DType::F32 && part_lse.dtype() == DType::F32, op, ": lse and part_lse must be float32");
  const int64_t rows = lse.numel();
  if (rows == 0) return;
  DeviceGuard guard(out.device().index);
  attention_merge_kernel<<<grid_for(rows, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<bf16*>(out.raw()), static_cast<float*>(lse.raw()), static_cast<const bf16*>(part_out.raw()),
      static_cast<const float*>(part_lse.raw()), rows, out.size(2));
  CUDA_CHECK_LAUNCH(op);
}

}  // namespace bb::cuda
