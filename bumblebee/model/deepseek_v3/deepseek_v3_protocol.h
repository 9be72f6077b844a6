// ModelProtocol of DeepSeek-V3: the generic Decoder with multi-head latent
// attention (MLAttention) in every layer's attention slot and, in the
// feed-forward slot, the dense SwiGLU MLP on the first first_k_dense_replace
// layers and a SparseMoE with sigmoid scoring, group-limited top-k, the
// routed scaling factor and the expert bias, plus the shared experts, on the
// others; num_nextn_predict_layers multi-token prediction layers on the last
// stage (the Decoder's, multi_token_prediction.h), weighted by
// mtp_loss_scaling_factor.
#pragma once

#include "bumblebee/model/deepseek_v3/deepseek_v3_config.h"
#include "bumblebee/model/protocol.h"

namespace bb {

class DeepseekV3Protocol : public ModelProtocol {
 public:
  nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const override;
  std::unique_ptr<ModelChunk> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const override;
  void load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const override;
  void export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const override;
};

// FLOPs of one training step counting active parameters only (k routed
// experts, the shared experts and the router per token).
double deepseek_v3_train_flops(const DeepseekV3Config& cfg, int64_t tokens, int64_t seq_len);

// Registration as "deepseek_v3" (HF model_type deepseek_v3).
void register_deepseek_v3();

}  // namespace bb
