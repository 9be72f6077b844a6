// HF peft adapter files: export, adapter_config.json, load, merge.
#include "bumblebee/primitive/ckpt/peft_adapter.h"

#include <nlohmann/json.hpp>
#include <cmath>
#include <set>

#include "bumblebee/core/input_file.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/ckpt/hf_weights.h"
#include "bumblebee/primitive/ckpt/peft_expert_adapter.h"
#include "bumblebee/primitive/ckpt/safetensors.h"

namespace bb {

using json = nlohmann::json;
namespace {
constexpr const char* kPrefix = "base_model.model.";

// The decoder layer of "base_model.model.model.layers.{i}.*"; -1 for none.
int64_t layer_of(const std::string& name) {
  const std::string marker = ".layers.";
  const size_t at = name.find(marker);
  if (at == std::string::npos) return -1;
  try {
    return std::stoll(name.substr(at + marker.size()));
  } catch (const std::exception&) {
    return -1;
  }
}
}  // namespace

std::string peft_tensor_name(const std::string& param_name) { return kPrefix + param_name; }

void export_lora_params(ParamStore& store, TensorParallel& tp, dist::Communicator& ep, const WeightSink& sink) {
  for (Parameter& p : store.params())
    if (is_lora_param(p.name) && !is_expert_lora_param(p.name)) sink(peft_tensor_name(p.name), gather_full(p, tp));
  if (store.lora() && !store.lora()->target_parameters.empty())
    export_expert_lora_params(store, ep, *store.lora(), sink);
}

std::string peft_adapter_config(const LoraConfig& cfg, const std::string& base_model_name_or_path) {
  json c = {{"peft_type", "LORA"},
            {"task_type", "CAUSAL_LM"},
            {"base_model_name_or_path", base_model_name_or_path},
            {"r", cfg.rank},
            {"lora_alpha", cfg.alpha},
            {"lora_dropout", cfg.dropout},
            {"use_rslora", cfg.use_rslora},
            {"use_dora", cfg.use_dora},
            {"bias", "none"},
            {"fan_in_fan_out", false},
            {"inference_mode", true},
            {"init_lora_weights", true},
            {"modules_to_save", nullptr},
            {"target_modules", cfg.target_modules.size() == 1 && cfg.target_modules[0] == "all-linear"
                                   ? json("all-linear")
                                   : json(cfg.target_modules)}};
  if (!cfg.target_parameters.empty()) c["target_parameters"] = cfg.target_parameters;
  return c.dump(2) + "\n";
}

void load_peft_adapter(ParamStore& store, const std::string& dir, const LoraConfig& cfg, const LayerRange& range) {
  const std::string config_path = dir + "/adapter_config.json";
  json c;
  try {
    c = json::parse(read_input_file(config_path, "peft adapter config"));
  } catch (const json::exception& e) {
    BB_FAIL(config_path, " is not valid JSON: ", e.what());
  }
  const std::string base = c.value("base_model_name_or_path", std::string("?"));
  BB_CHECK(c.value("peft_type", std::string()) == "LORA", config_path, ": peft_type ", c.value("peft_type", json()).dump(),
           " is not LORA");
  BB_CHECK(c.value("use_dora", false) == cfg.use_dora, config_path, ": use_dora ",
           c.value("use_dora", false) ? "true" : "false",
           " differs from the run's peft.type (", cfg.use_dora ? "dora" : "lora", ")");
  BB_CHECK(c.value("r", int64_t(-1)) == cfg.rank, config_path, ": r ", c.value("r", json()).dump(),
           " differs from peft.rank ", cfg.rank);
  BB_CHECK(c.value("lora_alpha", -1.0) == cfg.alpha, config_path, ": lora_alpha ", c.value("lora_alpha", json()).dump(),
           " differs from peft.alpha ", cfg.alpha);
  BB_CHECK(c.value("use_rslora", false) == cfg.use_rslora, config_path, ": use_rslora ",
           c.value("use_rslora", false), " differs from peft.use_rslora ", cfg.use_rslora);
  const SafetensorsFile file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  std::set<std::string> used;
  for (Parameter& p : store.params()) {
    if (!is_lora_param(p.name)) continue;
    if (is_expert_lora_param(p.name)) {
      load_expert_lora_param(p, file, cfg, base, used);
      continue;
    }
    const std::string name = peft_tensor_name(p.name);
    BB_CHECK(file.has(name), file.path(), " (adapter of '", base, "') lacks tensor '", name,
             "'; is peft.target_modules the adapter's target_modules?");
    BB_CHECK(file.shape(name) == p.full_shape, "adapter tensor '", name, "' has shape ", shape_str(file.shape(name)),
             ", the model's parameter is ", shape_str(p.full_shape), " (the adapter was made for '", base, "')");
    const Tensor full = file.get(name);
    check_loadable_weight(name, full);
    p.value.copy_from(shard_of_full(p, full));
    used.insert(name);
  }
  for (const std::string& n : file.names())
    BB_CHECK(used.count(n) || (layer_of(n) >= 0 && !range.holds_layer(layer_of(n))), file.path(), " (adapter of '", base, "') holds tensor '", n,
             "' that no adapter of this model has (peft.target_modules and the layers must match the adapter's)");
}

Tensor merge_lora_weight(ParamStore& store, TensorParallel& tp, const std::string& hf_name, const Tensor& full_weight) {
  Parameter* a = store.find(lora_param_name(hf_name, "lora_A"));
  Parameter* b = store.find(lora_param_name(hf_name, "lora_B"));
  if (!a || !b) return full_weight;
  const Tensor a_full = gather_full(*a, tp).to(Device::cpu()).to(DType::F64);
  const Tensor b_full = gather_full(*b, tp).to(Device::cpu()).to(DType::F64);
  Tensor merged = full_weight.to(Device::cpu()).to(DType::F64).clone();
  ops::matmul(b_full, false, a_full, false, merged, store.lora()->scaling(), 1.0);
  if (Parameter* m = store.find(dora_magnitude_name(hf_name))) {
    // DoRA: (m / ||W + s B A||) (W + s B A), the norm of the full rows.
    const std::vector<double> mag = gather_full(*m, tp).to_doubles();
    const int64_t out = merged.size(0), in = merged.size(1);
    double* v = merged.data<double>();
    for (int64_t j = 0; j < out; ++j) {
      double sq = 0;
      for (int64_t i = 0; i < in; ++i) sq += v[j * in + i] * v[j * in + i];
      const double g = mag[size_t(j)] / std::sqrt(sq);
      for (int64_t i = 0; i < in; ++i) v[j * in + i] *= g;
    }
  }
  return merged.to(full_weight.dtype());
}

}  // namespace bb
