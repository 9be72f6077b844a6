// Llama 3.x: pre-norm decoder, GQA, SwiGLU, rope with llama3 frequency scaling.
#include "bumblebee/model/llama/llama.h"

#include "bumblebee/model/dense/dense_protocol.h"
#include "bumblebee/model/registry.h"

namespace bb {

void register_llama() { register_model("llama", {"llama"}, {{"lite", std::make_shared<DenseProtocol>(false)}}); }

}  // namespace bb
