// ModelProtocol shared by the dense decoder models (Llama 3, Qwen3); each
// model sets whether it carries per-head q/k RMSNorm. The model itself is the
// generic Decoder with DecoderLayers whose feed-forward slot is a SwiGLU MLP.
#pragma once

#include "bumblebee/model/decoder/decoder.h"
#include "bumblebee/model/dense/dense_config.h"
#include "bumblebee/model/protocol.h"

namespace bb {

class DenseProtocol : public ModelProtocol {
 public:
  explicit DenseProtocol(bool qk_norm) : qk_norm_(qk_norm) {}
  nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const override;
  std::unique_ptr<ModelChunk> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const override;
  void load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const override;
  void export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const override;

 private:
  bool qk_norm_;
};

// The parts of a DecoderSpec every decoder over a DenseConfig shares (sizes,
// norm eps, init range, tied embeddings) with `config` as the model's
// normalised config; the caller adds its layers (and MoE fields).
DecoderSpec dense_decoder_spec(const DenseConfig& d, nlohmann::json config);

// FLOPs of one training step of a dense model (see ModelChunk::train_flops).
double dense_train_flops(const DenseConfig& cfg, int64_t tokens, int64_t seq_len);

}  // namespace bb
