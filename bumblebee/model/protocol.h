// The model protocol: what a model package provides so the runtime can build,
// run, load and export it without knowing its architecture.
//
// A protocol turns an HF config.json (plus overrides) into the model's config,
// and builds a ModelChunk from it: the part of the model one rank holds for
// one pipeline stage (or one virtual-pipeline chunk), a contiguous range of
// decoder layers plus the embedding on the first stage and the final norm, LM
// head and loss on the last. The whole model is the one-stage case. A chunk
// owns its parameters (one ParamStore, HF-named, tensor-parallel-sharded and
// sorted into parameter groups) and runs one microbatch forward and backward
// with explicit activations. The protocol also loads the chunk's weights from
// an HF checkpoint and exports them in HF naming, through the model package's
// own checkpoint mapping. Model code composes primitives only; it never calls
// a collective itself.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/weight_mapping.h"
#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/layer_range.h"
#include "bumblebee/primitive/modules/lora.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/parallel_context.h"
#include "bumblebee/primitive/recompute/recompute.h"

namespace bb {

// One microbatch on the compute device, already shifted for next-token
// prediction and padded so the token count divides by tp.
struct DeviceMicroBatch {
  Tensor input_ids;     // [T] int64
  Tensor labels;        // [T] int64: label of position t is the next token of its sequence
  Tensor loss_mask;     // [T] loss (stat) dtype: 1 where position t is scored (multi-token prediction reads it)
  SequenceLayout seq;   // position_ids [T], cu_seqlens [S+1], max_seqlen
  int64_t num_tokens = 0;        // T, padding included
  // This microbatch's share of the step's auxiliary loss (its loss tokens over
  // the step's, all dp ranks): the MoE load-balancing loss is computed per
  // microbatch and the step's is the weighted sum (see docs/models.md).
  double aux_loss_weight = 1.0;
  // The last stage also computes each token's entropy (ModelChunk::entropy).
  bool calculate_entropy = false;
};

// The auxiliary losses of one microbatch's forward (MoE routers): `value` the
// load-balancing loss as HF reports it (`aux_loss`; present when it is on),
// `loss` what the chunk's backward adds to the objective (each router loss's
// coefficient x aux_loss_weight x its value, the z-loss included), and the
// router metrics of the chunk's layers (z_loss, expert_load_min.L /
// expert_load_max.L per MoE layer L, dropped_tokens).
struct AuxLoss {
  bool present = false;
  double value = 0.0, loss = 0.0;
  std::map<std::string, double> metrics;
};

struct BuildContext {
  std::shared_ptr<ParallelContext> parallel;
  Device device = Device::cpu();
  DType dtype = DType::F32;        // parameter and activation dtype
  DType grad_dtype = DType::F32;   // gradient buffer dtype
  DType residual_dtype = DType::F32;  // the residual stream between layers: dtype, or float32 over bfloat16
  RecomputeConfig recompute;        // selective parts per layer (protocols), full runs (the decoder)
  nlohmann::json impl_cfg = nlohmann::json::object();
  double temperature = 1.0;
  int64_t lm_head_chunk_tokens = 0;  // tokens per LM-head chunk; 0: auto (lm_head.h)
  LayerRange layers;
  ParamGroupFn param_groups;       // empty: one trainable group over one rank
  int64_t grad_bucket_size = 0;    // elements per gradient bucket (<= 0: one bucket), see grad_bucket_layout.h
  std::shared_ptr<const LoraConfig> lora;   // adapters the linear layers declare (lora.h); null: none
};

// Told that a parameter's gradient is final for this step.
using GradReadyFn = std::function<void(const Parameter&)>;

// Forward activations a chunk keeps for its backward; opaque to the runtime.
struct ForwardState {
  virtual ~ForwardState() = default;
};

class ModelChunk {
 public:
  virtual ~ModelChunk() = default;
  virtual ParamStore& params() = 0;
  virtual const nlohmann::json& config() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual const LayerRange& layers() const = 0;
  bool is_first_stage() const { return layers().pre_process; }
  bool is_last_stage() const { return layers().post_process; }
  // FLOPs of one forward+backward of the whole model over `tokens` tokens in
  // sequences of `seq_len` (6N per token plus causal attention), for MFU reports.
  virtual double train_flops(int64_t tokens, int64_t seq_len) const = 0;
  // Initialise every parameter from `seed` (same values for any layout).
  virtual void init_weights(uint64_t seed) = 0;
  // Parameters that another stage holds a copy of and that must stay equal
  // (a tied embedding on the first and the last stage): their gradients are
  // summed over the stages that hold them. Empty for the whole model.
  virtual std::vector<Parameter*> tied_params() = 0;

  // One microbatch forward. The first stage reads mb.input_ids (`hidden_in`
  // is ignored); later stages take the previous stage's output `hidden_in`
  // [T/tp, H]. Returns the hidden states for the next stage, or on the last
  // stage the per-token loss [T] (= -log p(label), stat dtype). When the last
  // stage gets `dloss` [T] the loss gradient is folded into this pass (fused
  // head).
  virtual Tensor forward(const DeviceMicroBatch& mb, const Tensor& hidden_in, const Tensor& dloss,
                         std::unique_ptr<ForwardState>& state) = 0;
  // The matching backward: `grad_out` is the gradient of this chunk's output
  // (dloss [T] on the last stage). Returns the gradient of `hidden_in`
  // (undefined on the first stage). On the last microbatch of a step
  // `on_grad_ready` is set (empty on the others): then, as soon as backward is
  // done with a parameter, the chunk makes its gradient final, reducing over tp
  // what the tp group must agree on (the gradients of tp-replicated
  // parameters), and reports it, every trainable parameter exactly once. The
  // data-parallel reduction of its bucket may start right away, so the
  // gradient must not change after the report.
  virtual Tensor backward(const DeviceMicroBatch& mb, const Tensor& grad_out, ForwardState& state,
                          const GradReadyFn& on_grad_ready) = 0;
  // The auxiliary loss of the forward that filled `state` (not present for
  // models without one). Its gradient is part of backward.
  virtual AuxLoss aux_loss(const ForwardState& /*state*/) const { return {}; }
  // On the last stage, the per-token entropy [T] (stat dtype) of the softmax
  // at the temperature, of the forward that filled `state` when
  // mb.calculate_entropy was set; else undefined. A loss over it hands its
  // gradient [T] to set_entropy_grad before backward (a forward without the
  // fused dloss), and backward adds that path.
  virtual Tensor entropy(const ForwardState& /*state*/) const { return Tensor(); }
  virtual void set_entropy_grad(ForwardState& /*state*/, const Tensor& /*dentropy*/) {
    BB_FAIL("this model computes no entropy, so a loss cannot take its gradient");
  }
  // The whole model's routers: what router replay's PackedBatch::
  // routed_experts holds per token (moe_layers x top_k ids), and whether the
  // auxiliary loss couples every layer (HF's form: it cannot be split over
  // pipeline stages), and whether a router's losses or drops depend on the
  // whole microbatch (a load-balancing loss, the z-loss's mean, an expert
  // capacity): context parallelism splits each sequence over the cp ranks, so
  // such a model is refused under cp > 1, while per-token routing (DeepSeek-V3's
  // sigmoid router, aux-loss-free) runs there. Zeros: no MoE layer.
  struct RouterShape {
    int64_t moe_layers = 0, top_k = 0, num_experts = 0;
    bool aux_loss_couples_layers = false;
    bool microbatch_statistics = false;
  };
  virtual RouterShape router_shape() const { return {}; }
  // Called on every rank after each optimizer step (collective over the dp x
  // cp group): state the model updates outside the gradient, such as the
  // expert biases of auxiliary-loss-free MoE balancing. Default: nothing.
  virtual void after_optimizer_step() {}
  // Full-vocabulary logits [T, V] (host, float64) of one microbatch (no
  // gradients; gathered over tp), for validation against a reference. Like
  // forward, a stage after the first takes the previous stage's `hidden_in`,
  // and a stage before the last returns its hidden states instead.
  virtual Tensor logits(const DeviceMicroBatch& mb, const Tensor& hidden_in) = 0;
};

class ModelProtocol {
 public:
  virtual ~ModelProtocol() = default;
  // HF config.json (already read) + overrides -> this model's config (json).
  virtual nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const = 0;
  virtual std::unique_ptr<ModelChunk> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const = 0;
  // Fills the chunk's parameters from an HF checkpoint: each rank reads the
  // tensors of its own layers and only its shard of each; tensors of other
  // stages may be present.
  virtual void load_hf_weights(ModelChunk& chunk, const HFCheckpoint& ckpt) const = 0;
  // Streams the chunk's parameters as full tensors in HF naming (gathered over
  // tp); every rank of the tp group must call it.
  virtual void export_hf_weights(ModelChunk& chunk, ParallelContext& pc, const WeightSink& sink) const = 0;
};

}  // namespace bb
