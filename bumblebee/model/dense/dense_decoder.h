// DenseDecoder: the CausalLM of the Llama 3 / Qwen3 family, composed from
// primitives: VocabParallelEmbedding -> DecoderLayer x L -> RMSNorm -> LMHead.
// Parameter names and registration order follow HF transformers.
#pragma once

#include <memory>
#include <vector>

#include "bumblebee/model/dense/dense_config.h"
#include "bumblebee/model/protocol.h"
#include "bumblebee/primitive/modules/embedding.h"
#include "bumblebee/primitive/modules/lm_head.h"

namespace bb {

class DenseDecoder : public CausalLM {
 public:
  DenseDecoder(const DenseConfig& cfg, const BuildContext& ctx);

  ParamStore& params() override { return store_; }
  const nlohmann::json& config() const override { return config_json_; }
  int64_t vocab_size() const override { return cfg_.vocab_size; }
  double train_flops(int64_t tokens, int64_t seq_len) const override;
  void init_weights(uint64_t seed) override;
  Tensor forward(const DeviceMicroBatch& mb, const Tensor& dloss, std::unique_ptr<ForwardState>& state) override;
  void backward(const DeviceMicroBatch& mb, const Tensor& dloss, ForwardState& state,
                const GradReadyFn& on_grad_ready) override;
  Tensor logits(const DeviceMicroBatch& mb) override;

 private:
  struct State;
  // Makes the gradients of parameters [first, end) final and reports them.
  void grads_ready(size_t first, size_t end, const GradReadyFn& on_grad_ready);
  DenseConfig cfg_;
  nlohmann::json config_json_;
  BuildContext ctx_;
  ParamStore store_;
  TensorParallel tp_;
  Tensor inv_freq_;
  std::unique_ptr<VocabParallelEmbedding> embed_;
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  // Layer i owns parameters [layer_first_param_[i], layer_first_param_[i + 1]).
  std::vector<size_t> layer_first_param_;
  std::unique_ptr<RMSNorm> norm_;
  std::unique_ptr<LMHead> head_;
};

}  // namespace bb
