// The models that ship with Bumblebee.
#include "bumblebee/model/builtin_models.h"

#include "bumblebee/model/llama/llama.h"
#include "bumblebee/model/qwen3/qwen3.h"

namespace bb {

void register_builtin_models() {
  register_qwen3();
  register_llama();
}

}  // namespace bb
