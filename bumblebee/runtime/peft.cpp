// make_lora_config (peft.* keys -> LoraConfig) and Runtime::save_peft_adapter.
#include "bumblebee/runtime/peft.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

std::shared_ptr<const LoraConfig> make_lora_config(const PeftConfig& peft) {
  if (peft.type == "none") return nullptr;
  BB_CHECK(peft.type == "lora" || peft.type == "dora", "peft.type=", peft.type, " is not one of none, lora, dora");
  auto cfg = std::make_shared<LoraConfig>();
  cfg->use_dora = peft.type == "dora";
  std::stringstream list(peft.target_modules);
  for (std::string m; std::getline(list, m, ',');)
    if (!m.empty()) cfg->target_modules.push_back(m);
  std::stringstream params(peft.target_parameters);
  for (std::string m; std::getline(params, m, ',');)
    if (!m.empty()) cfg->target_parameters.push_back(m);
  cfg->rank = peft.rank;
  cfg->alpha = peft.alpha;
  cfg->dropout = peft.dropout;
  cfg->use_rslora = peft.use_rslora;
  check_lora_config(*cfg);
  return cfg;
}

void check_lora_targets_found(const LoraConfig& cfg, const ParamStore& store, const LayerRange& range) {
  if (range.end_layer >= 0 && range.first_layer >= range.end_layer) return;   // a chunk without layers
  for (const std::string& t : cfg.target_modules) {
    if (t == "all-linear") continue;
    bool found = false;
    for (const Parameter& p : store.params()) found = found || p.name.ends_with("." + t + ".lora_A.weight");
    BB_CHECK(found, "peft.target_modules names '", t, "', which no linear layer of this model has",
             " (the fused MoE experts are peft.target_parameters: mlp.experts.gate_up_proj, mlp.experts.down_proj)");
  }
  for (const std::string& t : cfg.target_parameters) {
    bool found = false;
    for (const std::string& param : {std::string("gate_up_proj"), std::string("down_proj")})
      if (t.ends_with(param))
        for (const Parameter& p : store.params()) found = found || p.name.ends_with("." + param + ".lora_A.weight");
    BB_CHECK(found, "peft.target_parameters names '", t, "', which no MoE layer of this model has");
  }
}

void Runtime::save_peft_adapter(ModelHandle& h, const std::string& dir) {
  ModelState& st = h.state();
  const LoraConfig* lora = st.chunks.front()->params().lora();
  BB_CHECK(lora, "save_peft_adapter: the model has no LoRA adapters (peft.type=none)");
  std::vector<std::pair<std::string, Tensor>> tensors;
  stream_chunks(
      h, [&](ModelChunk& chunk, const WeightSink& out) { export_lora_params(chunk.params(), st.context->tp(), st.context->ep(), out); },
      [&](const std::string& name, const Tensor& t) { tensors.emplace_back(name, t.to(Device::cpu())); });
  if (parallel_->world_rank() != 0) return;
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  const std::string tmp = dir + "/adapter_config.json.tmp";
  {
    std::ofstream f(tmp);
    f << peft_adapter_config(*lora, cfg_.hf_path);
    BB_CHECK(f.good(), "cannot write ", tmp);
  }
  std::filesystem::rename(tmp, dir + "/adapter_config.json");
}

}  // namespace bb
