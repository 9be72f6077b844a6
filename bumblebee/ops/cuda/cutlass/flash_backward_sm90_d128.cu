// The sm_90a flash attention backward at head dims (128, 128).
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_launch.cuh"

namespace bb::cuda {

template <>
void flash_sm90_backward_tiles<128, 128>(const BackwardArgs& args) {
  launch<fs::BackwardTraits<128>>(args);
}

}  // namespace bb::cuda
