// The sm_90a flash attention backward at head dims (64, 64).
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_launch.cuh"

namespace bb::cuda {

template <>
void flash_sm90_backward_tiles<64, 64>(const BackwardArgs& args) {
  launch<fs::BackwardTraits<64>>(args);
}

}  // namespace bb::cuda
