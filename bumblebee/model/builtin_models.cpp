// The models that ship with Bumblebee.
#include "bumblebee/model/builtin_models.h"

#include "bumblebee/model/deepseek_v3/deepseek_v3_protocol.h"
#include "bumblebee/model/llama/llama.h"
#include "bumblebee/model/qwen3/qwen3.h"
#include "bumblebee/model/qwen3_moe/qwen3_moe_protocol.h"

namespace bb {

void register_builtin_models() {
  register_qwen3();
  register_llama();
  register_qwen3_moe();
  register_deepseek_v3();
}

}  // namespace bb
