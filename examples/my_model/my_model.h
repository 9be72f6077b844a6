// An out-of-tree model: "my_llama", a Llama variant that lives in the user's
// repository and plugs into Bumblebee through register_model. It reuses the
// dense decoder protocol but could implement ModelProtocol from scratch.
#pragma once

namespace my_repo {
// Registers "my_llama" for HF model_type "my_llama" with impl "lite".
void register_my_llama();
}
