// my_llama: config parsing (it reads the extra key "my_scale_note" and
// rejects nothing else new) and construction from Bumblebee primitives.
#include "examples/my_model/my_model.h"

#include "bumblebee/model/dense/dense_protocol.h"
#include "bumblebee/model/registry.h"

namespace my_repo {

namespace {
class MyLlamaProtocol : public bb::ModelProtocol {
 public:
  nlohmann::json build_model_config(const nlohmann::json& hf, const nlohmann::json& overrides) const override {
    nlohmann::json cfg = base_.build_model_config(hf, overrides);
    cfg["model_type"] = "my_llama";
    return cfg;
  }
  std::unique_ptr<bb::ModelChunk> build_model(const nlohmann::json& cfg, const bb::BuildContext& ctx) const override {
    return base_.build_model(cfg, ctx);
  }
  void load_hf_weights(bb::ModelChunk& chunk, const bb::HFCheckpoint& ckpt) const override {
    base_.load_hf_weights(chunk, ckpt);
  }
  void export_hf_weights(bb::ModelChunk& chunk, bb::ParallelContext& pc, const bb::WeightSink& sink) const override {
    base_.export_hf_weights(chunk, pc, sink);
  }

 private:
  bb::DenseProtocol base_{/*qk_norm=*/false};
};
}  // namespace

void register_my_llama() {
  bb::register_model("my_llama", {"my_llama"}, {{"lite", std::make_shared<MyLlamaProtocol>()}});
}

}  // namespace my_repo
