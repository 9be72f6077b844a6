// cuDNN fused attention (SDPA) through the cudnn-frontend graph API.
//
// Built only when CMake found the cudnn-frontend headers and libcudnn
// (BB_WITH_CUDNN); otherwise asking for it is an error that says so.
#include "bumblebee/ops/cuda/attention_backends.h"

#include "bumblebee/core/error.h"

namespace bb::cuda {

#ifndef BB_WITH_CUDNN

namespace {
[[noreturn]] void not_built() {
  BB_FAIL("cuDNN attention is not in this build: configure found no cudnn-frontend headers or libcudnn "
          "(run scripts/fetch_cuda_deps.sh, then reconfigure)");
}
}  // namespace

bool cudnn_attention_built() { return false; }

void cudnn_attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double, Tensor&,
                             Tensor&) {
  not_built();
}

void cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, int64_t, double, Tensor&, Tensor&, Tensor&) {
  not_built();
}

#endif

}  // namespace bb::cuda
