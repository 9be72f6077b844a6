// Registration of the models that ship with Bumblebee (qwen3, llama).
#pragma once

namespace bb {
void register_builtin_models();
}
