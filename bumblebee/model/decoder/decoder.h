// Decoder: the generic decoder-only language model chunk that model packages
// compose: VocabParallelEmbedding -> layer x L -> RMSNorm -> LMHead, built for
// a range of layers (a pipeline stage; the whole model is the one-stage case).
//
// A model package says what its layers are (DecoderSpec::layer builds layer i
// from primitives: attention, a feed-forward slot, norms) and the decoder
// does the rest the same way for every model: the layer loop, parameter
// registration in HF order, full recompute (each of the chunk's first N
// layers, or runs of N layers, wrapped in Recompute: BuildContext::recompute),
// the tied embedding, multi-token prediction on the last stage when the
// spec asks for it, and gradient-ready reporting layer by layer so the
// data-parallel reduction overlaps the backward of earlier layers.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "bumblebee/model/protocol.h"
#include "bumblebee/primitive/modules/embedding.h"
#include "bumblebee/primitive/modules/lm_head.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"
#include "bumblebee/primitive/modules/multi_token_prediction.h"
#include "bumblebee/primitive/modules/rmsnorm.h"

namespace bb {

struct DecoderSpec {
  nlohmann::json config;              // the model's normalised config (ModelChunk::config)
  int64_t vocab_size = 0, hidden_size = 0, num_layers = 0;
  double norm_eps = 1e-6;
  double initializer_range = 0.02;    // std of the normal init of every matrix
  bool tie_word_embeddings = false;
  // MoE models: every microbatch's forward records the router statistics of
  // its MoE layers (RouterAuxLoss: expert load, dropped rows) and the router
  // losses `router_losses` turns on (the load-balancing loss when
  // output_router_logits, the z-loss), and the loss adds each coefficient x it.
  bool moe = false;
  RouterLossConfig router_losses;
  ModelChunk::RouterShape router_shape;   // the whole model's (router replay)
  // Declares and builds decoder layer `layer`, its parameters named `prefix` + HF suffix.
  DecoderLayerFactory build_layer;
  // The layers build_layer makes write every gradient through grad_write_beta
  // or grad_to_accumulate (parameter.h), as the library's modules do: the
  // store then zeroes gradients lazily (ParamStore::defer_zero_grads). False
  // for a factory whose layers may add into gradients on their own.
  bool lazy_grad_zero = false;
  // Multi-token prediction (multi_token_prediction.h): `mtp_depths` MTP
  // layers on the last stage after the final decoder layer, depth k built
  // around decoder layer num_layers + k - 1; their objective, scaled by
  // mtp_loss_scale / mtp_depths, is part of the auxiliary loss (AuxLoss::loss,
  // with the metric mtp_loss: the mean of loss^k over the depths).
  int64_t mtp_depths = 0;
  double mtp_loss_scale = 0.1;
  // ModelChunk::after_optimizer_step; empty: nothing.
  std::function<void()> after_optimizer_step;
  // ModelChunk::train_flops of the whole model.
  std::function<double(int64_t tokens, int64_t seq_len)> train_flops;
};

class Decoder : public ModelChunk {
 public:
  Decoder(DecoderSpec spec, const BuildContext& ctx);

  ParamStore& params() override { return store_; }
  const nlohmann::json& config() const override { return spec_.config; }
  int64_t vocab_size() const override { return spec_.vocab_size; }
  const LayerRange& layers() const override { return range_; }
  double train_flops(int64_t tokens, int64_t seq_len) const override { return spec_.train_flops(tokens, seq_len); }
  void init_weights(uint64_t seed) override;
  std::vector<Parameter*> tied_params() override;
  Tensor forward(const DeviceMicroBatch& mb, const Tensor& hidden_in, const Tensor& dloss,
                 std::unique_ptr<ForwardState>& state) override;
  Tensor backward(const DeviceMicroBatch& mb, const Tensor& grad_out, ForwardState& state,
                  const GradReadyFn& on_grad_ready) override;
  AuxLoss aux_loss(const ForwardState& state) const override;
  Tensor entropy(const ForwardState& state) const override;
  void set_entropy_grad(ForwardState& state, const Tensor& dentropy) override;
  RouterShape router_shape() const override { return spec_.router_shape; }
  void after_optimizer_step() override {
    if (spec_.after_optimizer_step) spec_.after_optimizer_step();
  }
  Tensor logits(const DeviceMicroBatch& mb, const Tensor& hidden_in) override;

 private:
  struct State;
  // Makes the gradients of parameters [first, end) final and reports them.
  void grads_ready(size_t first, size_t end, const GradReadyFn& on_grad_ready);
  DecoderSpec spec_;
  BuildContext ctx_;
  LayerRange range_;   // end_layer resolved
  ParamStore store_;
  std::unique_ptr<VocabParallelEmbedding> embed_;   // first stage
  // The chunk's layers as units: a layer, a recomputed layer, or a recomputed
  // run of layers (uniform full recompute); unit u holds the chunk's layers
  // [unit_first_layer_[u], unit_first_layer_[u + 1]).
  std::vector<std::unique_ptr<Block>> units_;
  std::vector<size_t> unit_first_layer_;
  // Layer i owns parameters [layer_first_param_[i], layer_first_param_[i + 1]).
  std::vector<size_t> layer_first_param_;
  std::unique_ptr<RMSNorm> norm_;                   // last stage
  Parameter* head_weight_ = nullptr;                // last stage: lm_head, the embedding, or its tied copy
  std::unique_ptr<LMHead> head_;
  std::unique_ptr<MultiTokenPrediction> mtp_;       // last stage, when spec_.mtp_depths > 0
};

}  // namespace bb
