// Registration of the llama model (HF model_type "llama").
#pragma once

namespace bb {
void register_llama();
}
