// flash_sm90_backward (flash_backward_sm90.h): the head dims the kernels
// take, and the dispatch to their tile configurations
// (flash_backward_sm90_configs.h, one translation unit each).
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90.h"

#include <climits>

#include "bumblebee/core/error.h"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_configs.h"

namespace bb::cuda {

bool flash_sm90_backward_takes(int64_t head_dim_qk, int64_t head_dim_v) {
  return (head_dim_qk == 64 && head_dim_v == 64) || (head_dim_qk == 128 && head_dim_v == 128) ||
         (head_dim_qk == 192 && head_dim_v == 128);
}

void flash_sm90_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const ops::AttentionSpans& spans, double scale, Tensor& dq, Tensor& dk,
                         Tensor& dv) {
  const int64_t dqk = q.size(2), dv_dim = v.size(2);
  BB_CHECK(flash_sm90_backward_takes(dqk, dv_dim), "flash_sm90_backward: no tiles for head dims q/k ", dqk,
           " and v ", dv_dim);
  // TMA coordinates are 32-bit.
  BB_CHECK(q.size(0) <= INT_MAX && k.size(0) <= INT_MAX, "flash_sm90_backward: more than 2^31 tokens");
  const BackwardArgs args{dout, q, k, v, out, lse, spans, scale, dq, dk, dv};
  if (dqk == 64) flash_sm90_backward_tiles<64, 64>(args);
  else if (dqk == 128) flash_sm90_backward_tiles<128, 128>(args);
  else flash_sm90_backward_tiles<192, 128>(args);
}

}  // namespace bb::cuda
