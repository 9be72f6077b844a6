// The sm_90a flash attention backward by tile configuration, one translation
// unit each (flash_backward_sm90_d64.cu, _d128.cu, _d192.cu), for
// flash_backward_sm90.cu's dispatch on the head dims (q/k, v).
#pragma once

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb::cuda {

// flash_sm90_backward's arguments (flash_backward_sm90.h).
struct BackwardArgs {
  const Tensor &dout, &q, &k, &v, &out, &lse;
  const ops::AttentionSpans& spans;
  double scale;
  Tensor &dq, &dk, &dv;
};

template <int DQK, int DV>
void flash_sm90_backward_tiles(const BackwardArgs& args);
template <>
void flash_sm90_backward_tiles<64, 64>(const BackwardArgs& args);
template <>
void flash_sm90_backward_tiles<128, 128>(const BackwardArgs& args);
template <>
void flash_sm90_backward_tiles<192, 128>(const BackwardArgs& args);

}  // namespace bb::cuda
