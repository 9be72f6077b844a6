// Qwen3 (dense): Llama-style decoder with per-head RMSNorm on q and k.
#include "bumblebee/model/qwen3/qwen3.h"

#include "bumblebee/model/dense/dense_protocol.h"
#include "bumblebee/model/registry.h"

namespace bb {

void register_qwen3() { register_model("qwen3", {"qwen3"}, {{"lite", std::make_shared<DenseProtocol>(true)}}); }

}  // namespace bb
