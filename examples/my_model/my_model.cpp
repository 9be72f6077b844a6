// An out-of-tree model as a plugin: "my_llama", a Llama variant that lives in
// the user's repository. It reuses the dense decoder protocol but could
// implement ModelProtocol from scratch. Built as libmy_model.so, which
// registers "my_llama" (HF model_type "my_llama", impl "lite") when
// bb::load_plugin, the `plugin=` key or Python's bb.load_plugin loads it.
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

}  // namespace my_repo

// The plugin's entry point (bumblebee/model/plugin.h), called once after dlopen.
extern "C" void bb_register_plugin() {
  bb::register_model("my_llama", {"my_llama"}, {{"lite", std::make_shared<my_repo::MyLlamaProtocol>()}});
}
