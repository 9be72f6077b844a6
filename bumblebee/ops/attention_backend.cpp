// The process-wide attention backend setting.
#include "bumblebee/ops/attention_backend.h"

#include <atomic>

#include "bumblebee/core/error.h"

namespace bb::ops {

namespace {

std::atomic<AttentionBackend> g_backend{AttentionBackend::Auto};

}  // namespace

AttentionBackend attention_backend_from_name(const std::string& name) {
  if (name == "auto") return AttentionBackend::Auto;
  if (name == "flash") return AttentionBackend::Flash;
  if (name == "cudnn") {
#if defined(BB_WITH_CUDA) && !defined(BB_WITH_CUDNN)
    BB_FAIL("attention backend cudnn, but this build has no cuDNN attention (cudnn-frontend headers or libcudnn were "
            "not found at configure time; run scripts/fetch_cuda_deps.sh and reconfigure, or use flash)");
#endif
    return AttentionBackend::Cudnn;
  }
  BB_FAIL("attention backend '", name, "' is not known (expected auto, cudnn or flash)");
}

void set_attention_backend(const std::string& name) { g_backend = attention_backend_from_name(name); }

AttentionBackend attention_backend() { return g_backend; }

AttentionBackend auto_attention_backend(const AttentionCall& call) {
  if (!call.cudnn_built) return AttentionBackend::Flash;
  if (!call.hopper_kernel) return AttentionBackend::Cudnn;
  if (!call.backward) return AttentionBackend::Flash;
  const bool ours_faster = call.head_dim_qk == call.head_dim_v;
  return ours_faster && !call.deterministic ? AttentionBackend::Flash : AttentionBackend::Cudnn;
}

}  // namespace bb::ops
