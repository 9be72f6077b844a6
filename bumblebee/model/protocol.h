// The model protocol: what a model package provides so the runtime can build,
// run, load and export it without knowing its architecture.
//
// A protocol turns an HF config.json (plus overrides) into the model's config,
// and builds a CausalLM from it. A CausalLM owns its parameters (one
// ParamStore, HF-named and tensor-parallel-sharded) and runs one microbatch
// forward and backward with explicit activations. Model code composes
// primitives only; it never calls a collective itself.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/primitive/modules/decoder_layer.h"
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

// One microbatch on the compute device, already shifted for next-token
// prediction and padded so the token count divides by tp.
struct DeviceMicroBatch {
  Tensor input_ids;     // [T] int64
  Tensor labels;        // [T] int64: label of position t is the next token of its sequence
  SequenceLayout seq;   // position_ids [T], cu_seqlens [S+1], max_seqlen
  int64_t num_tokens = 0;        // T, padding included
};

struct BuildContext {
  std::shared_ptr<dist::ParallelState> parallel;
  Device device = Device::cpu();
  DType dtype = DType::F32;        // parameter and activation dtype
  DType grad_dtype = DType::F32;   // gradient buffer dtype
  DType residual_dtype = DType::F32;  // the residual stream between layers: dtype, or float32 over bfloat16
  Recompute recompute = Recompute::None;
  nlohmann::json impl_cfg = nlohmann::json::object();
  double temperature = 1.0;
  int64_t dp_pad = 1;              // each gradient bucket padded to a multiple of this
  int64_t grad_bucket_size = 0;    // elements per gradient bucket (<= 0: one bucket), see grad_bucket_layout.h
};

// Told that a parameter's gradient is final for this step.
using GradReadyFn = std::function<void(const Parameter&)>;

// Forward activations a CausalLM keeps for its backward; opaque to the runtime.
struct ForwardState {
  virtual ~ForwardState() = default;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual ParamStore& params() = 0;
  virtual const nlohmann::json& config() const = 0;
  virtual int64_t vocab_size() const = 0;
  // FLOPs of one forward+backward over `tokens` tokens in sequences of
  // `seq_len` (6N per token plus causal attention), for MFU reports.
  virtual double train_flops(int64_t tokens, int64_t seq_len) const = 0;
  // Initialise every parameter from `seed` (same values for any tp layout).
  virtual void init_weights(uint64_t seed) = 0;
  // Per-token loss [T] (= -log p(label), stat dtype). When dloss [T] is
  // defined the loss gradient is folded into this pass (fused head).
  virtual Tensor forward(const DeviceMicroBatch& mb, const Tensor& dloss, std::unique_ptr<ForwardState>& state) = 0;
  // On the last microbatch of a step `on_grad_ready` is set (empty on the
  // others): then, as soon as backward is done with a parameter, the model
  // makes its gradient final, reducing over tp what the tp group must agree
  // on (the gradients of tp-replicated parameters), and reports it, every
  // parameter exactly once. The data-parallel reduction of its bucket may
  // start right away, so the gradient must not change after the report.
  virtual void backward(const DeviceMicroBatch& mb, const Tensor& dloss, ForwardState& state,
                        const GradReadyFn& on_grad_ready) = 0;
  // Full-vocabulary logits [T, V] of one microbatch (no gradients; gathered
  // over tp), for validation against a reference.
  virtual Tensor logits(const DeviceMicroBatch& mb) = 0;
};

class ModelProtocol {
 public:
  virtual ~ModelProtocol() = default;
  // HF config.json (already read) + overrides -> this model's config (json).
  virtual nlohmann::json build_model_config(const nlohmann::json& hf_config, const nlohmann::json& overrides) const = 0;
  virtual std::unique_ptr<CausalLM> build_model(const nlohmann::json& model_config, const BuildContext& ctx) const = 0;
};

}  // namespace bb
