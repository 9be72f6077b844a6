// Registration of the qwen3 model (HF model_type "qwen3").
#pragma once

namespace bb {
void register_qwen3();
}
