// Which fused attention the CUDA attention op runs, set from the runtime's
// backend.attention_backend at build_model.
//
//   auto  - per call, whichever of the two is faster there (auto_attention_backend)
//   cudnn - cuDNN's fused attention (an error in a CUDA build without it)
//   flash - our kernels: FlashAttention-3-style on sm_90a, FlashAttention-2 elsewhere
//
// The environment variable BB_ATTENTION_BACKEND, when set, overrides the
// setting at every call (the op tests compare both backends in one process).
// A CPU-only build accepts all three names: its attention has one implementation.
#pragma once

#include <cstdint>
#include <string>

namespace bb::ops {

enum class AttentionBackend { Auto, Cudnn, Flash };

// A bb::Error naming `name` unless it is auto, cudnn or flash, or when it is
// cudnn in a CUDA build without cuDNN attention.
AttentionBackend attention_backend_from_name(const std::string& name);
void set_attention_backend(const std::string& name);
AttentionBackend attention_backend();

// What auto resolves to for one call of the CUDA attention, from what the
// build and device offer: `hopper_kernel` is whether our sm_90a kernel of
// this direction takes the head dims on this device. On an H200 those kernels
// lead cuDNN's in every forward they take and in the backward of equal q/k
// and v head dims (64, 128; GQA 1:1 to 8:1), and trail its (192, 128)
// backward (benchmarks/RESULTS.md); a deterministic backward needs cuDNN's
// algorithm, since ours sums dQ with atomics. Flash wherever cuDNN is not built.
struct AttentionCall {
  bool backward = false;
  int64_t head_dim_qk = 0, head_dim_v = 0;
  bool hopper_kernel = false;
  bool deterministic = false;
  bool cudnn_built = false;
};
AttentionBackend auto_attention_backend(const AttentionCall& call);

}  // namespace bb::ops
