// ModelProtocol of Qwen3-MoE: the generic Decoder with Qwen3 attention (q/k
// RMSNorm) and, per layer, a SparseMoE feed-forward (or the dense SwiGLU MLP
// on the layers HF keeps dense: mlp_only_layers, decoder_sparse_step), plus
// the load-balancing auxiliary loss when output_router_logits is set.
#pragma once

#include "bumblebee/model/protocol.h"
#include "bumblebee/model/qwen3_moe/qwen3_moe_config.h"

namespace bb {

class Qwen3MoeProtocol : public ModelProtocol {
 public:
  nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const override;
  std::unique_ptr<ModelChunk> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const override;
  void load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const override;
  void export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const override;
};

// FLOPs of one training step counting active parameters only: each token
// passes through its k experts' matrices and the router, not all E.
double qwen3_moe_train_flops(const Qwen3MoeConfig& cfg, int64_t tokens, int64_t seq_len);

// Registration as "qwen3_moe" (HF model_type qwen3_moe).
void register_qwen3_moe();

}  // namespace bb
