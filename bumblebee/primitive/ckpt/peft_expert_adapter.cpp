// peft's fused expert adapters <-> per-expert LoRA parameters.
#include "bumblebee/primitive/ckpt/peft_expert_adapter.h"

#include <map>
#include <vector>

#include "bumblebee/primitive/ckpt/hf_weights.h"

namespace bb {

namespace {
constexpr const char* kMarker = ".mlp.experts.";

// "model.layers.0.mlp.experts.3.gate_up_proj.lora_A.weight" in its parts.
struct ExpertLoraName {
  std::string experts;   // "model.layers.0.mlp.experts"
  int64_t expert = 0;    // 3
  std::string param;     // "gate_up_proj"
  std::string part;      // "lora_A"
};

ExpertLoraName parse(const std::string& name) {
  const size_t at = name.find(kMarker);
  BB_CHECK(at != std::string::npos, "'", name, "' is not an expert adapter parameter");
  ExpertLoraName n;
  n.experts = name.substr(0, at + std::string(kMarker).size() - 1);
  const std::string rest = name.substr(at + std::string(kMarker).size());   // "3.gate_up_proj.lora_A.weight"
  const size_t dot1 = rest.find('.'), dot2 = rest.find('.', dot1 + 1), dot3 = rest.find('.', dot2 + 1);
  BB_CHECK(dot3 != std::string::npos, "'", name, "' is not an expert adapter parameter");
  n.expert = std::stoll(rest.substr(0, dot1));
  n.param = rest.substr(dot1 + 1, dot2 - dot1 - 1);
  n.part = rest.substr(dot2 + 1, dot3 - dot2 - 1);
  return n;
}

std::string peft_name(const ExpertLoraName& n, const LoraConfig& cfg) {
  const bool nested = n.param == "gate_up_proj" && cfg.targets_expert_parameter("down_proj");
  return "base_model.model." + n.experts + (nested ? ".base_layer." : ".") + n.part + ".weight";
}
}  // namespace

bool is_expert_lora_param(const std::string& name) {
  return is_lora_param(name) && name.find(kMarker) != std::string::npos &&
         (name.find(".gate_up_proj.lora_") != std::string::npos || name.find(".down_proj.lora_") != std::string::npos);
}

std::string peft_expert_tensor_name(const std::string& param_name, const LoraConfig& cfg) {
  return peft_name(parse(param_name), cfg);
}

void export_expert_lora_params(ParamStore& store, dist::Communicator& ep, const LoraConfig& cfg,
                               const WeightSink& sink) {
  // One group per fused tensor, its local experts in order.
  std::vector<std::string> order;
  std::map<std::string, std::vector<Parameter*>> groups;
  for (Parameter& p : store.params()) {
    if (!is_expert_lora_param(p.name)) continue;
    const std::string key = peft_name(parse(p.name), cfg);
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&p);
  }
  for (const std::string& key : order) {
    const std::vector<Parameter*>& local = groups[key];
    const ExpertLoraName first = parse(local.front()->name);
    const int64_t count = int64_t(local.size()), experts = count * ep.size();
    const Parameter& tmpl = *local.front();
    const int64_t rows = tmpl.full_shape[0], cols = tmpl.full_shape[1];
    const bool is_a = first.part == "lora_A";
    const int64_t r = is_a ? rows : cols;
    std::vector<double> fused(size_t(experts * rows * cols));
    for (int64_t e = 0; e < experts; ++e) {
      const int owner = int(e / count);
      Tensor t = owner == ep.rank() ? local[size_t(e - first.expert)]->value.clone()
                                    : Tensor::empty(tmpl.value.shape(), tmpl.value.dtype(), tmpl.value.device());
      if (ep.size() > 1) ep.broadcast(t, owner);
      const std::vector<double> v = t.to_doubles();
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          // A_e [r, in] -> row e r + i; B_e [out, r] -> column j E + e of [out, E r].
          const size_t at = is_a ? size_t((e * r + i) * cols + j) : size_t(i * (experts * r) + j * experts + e);
          fused[at] = v[size_t(i * cols + j)];
        }
    }
    const Shape shape = is_a ? Shape{experts * r, cols} : Shape{rows, experts * r};
    sink(key, Tensor::from_doubles(fused, shape, tmpl.value.dtype()));
  }
}

void load_expert_lora_param(Parameter& p, const SafetensorsFile& file, const LoraConfig& cfg, const std::string& base,
                            std::set<std::string>& used) {
  const ExpertLoraName n = parse(p.name);
  const std::string name = peft_name(n, cfg);
  BB_CHECK(file.has(name), file.path(), " (adapter of '", base, "') lacks tensor '", name,
           "'; is peft.target_parameters the adapter's target_parameters?");
  const Shape& shape = file.shape(name);
  const int64_t rows = p.full_shape[0], cols = p.full_shape[1];
  const bool is_a = n.part == "lora_A";
  const int64_t r = is_a ? rows : cols;
  const bool fits = shape.size() == 2 && (is_a ? shape[1] == cols && shape[0] % r == 0 && shape[0] / r > n.expert
                                               : shape[0] == rows && shape[1] % r == 0 && shape[1] / r > n.expert);
  BB_CHECK(fits, "adapter tensor '", name, "' has shape ", shape_str(shape), ", the model's expert ", n.expert,
           " parameter '", p.name, "' is ", shape_str(p.full_shape), " per expert (the adapter was made for '", base,
           "')");
  const Tensor full = file.get(name);
  check_loadable_weight(name, full);
  const std::vector<double> v = full.to_doubles();
  const int64_t experts = (is_a ? shape[0] : shape[1]) / r;
  std::vector<double> mine(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      mine[size_t(i * cols + j)] =
          v[is_a ? size_t((n.expert * r + i) * cols + j) : size_t(i * (experts * r) + j * experts + n.expert)];
  p.value.copy_from(Tensor::from_doubles(mine, p.full_shape, p.value.dtype()).to(p.value.device()));
  used.insert(name);
}

}  // namespace bb
