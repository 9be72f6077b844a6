// Which fused attention the CUDA attention op runs, set from the runtime's
// backend.attention_backend at build_model.
//
//   auto  - cuDNN's fused attention when the build found cudnn-frontend, else flash
//   cudnn - cuDNN's fused attention (an error in a CUDA build without it)
//   flash - our FlashAttention-2 kernels
//
// The environment variable BB_ATTENTION_BACKEND, when set, overrides the
// setting at every call (the op tests compare both backends in one process).
// A CPU-only build accepts all three names: its attention has one implementation.
#pragma once

#include <string>

namespace bb::ops {

enum class AttentionBackend { Auto, Cudnn, Flash };

// A bb::Error naming `name` unless it is auto, cudnn or flash, or when it is
// cudnn in a CUDA build without cuDNN attention.
AttentionBackend attention_backend_from_name(const std::string& name);
void set_attention_backend(const std::string& name);
AttentionBackend attention_backend();

}  // namespace bb::ops
