// The sm_90a flash attention backward at multi-head latent attention's head
// dims (192, 128), on BackwardTraitsWide (built with CuTe's extended wgmma
// shapes: CMakeLists.txt).
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_launch.cuh"
#include "bumblebee/ops/cuda/cutlass/flash_backward_sm90_wide_traits.cuh"

namespace bb::cuda {

template <>
void flash_sm90_backward_tiles<192, 128>(const BackwardArgs& args) {
  launch<fs::BackwardTraitsWide>(args);
}

}  // namespace bb::cuda
