// FusedExpertSink: per-expert tensors regrouped into transformers 5's fused expert layout.
#include "bumblebee/primitive/ckpt/fused_experts.h"

#include <cstring>

#include "bumblebee/core/error.h"

namespace bb {

namespace {
const char kExperts[] = ".mlp.experts.";
const char* kProjs[] = {"gate_proj", "up_proj", "down_proj"};

std::string part_key(int64_t e, const char* proj) { return std::to_string(e) + "." + proj; }

// Copies `parts` (each [rows, cols], one dtype) one after another into one tensor of `shape`.
Tensor stacked(const std::vector<const Tensor*>& parts, const Shape& shape, const std::string& name) {
  const Tensor& first = *parts.front();
  Tensor out = Tensor::empty(shape, first.dtype());
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor* p : parts) {
    BB_CHECK(p->dtype() == first.dtype() && p->shape() == first.shape(), "fused export of '", name,
             "': the experts' tensors differ in shape or dtype (", shape_str(p->shape()), " vs ",
             shape_str(first.shape()), ")");
    std::memcpy(dst, p->raw(), p->nbytes());
    dst += p->nbytes();
  }
  return out;
}
}  // namespace

std::map<std::string, int64_t> fused_expert_layers(const HFCheckpoint& ckpt) {
  std::map<std::string, int64_t> out;
  const std::string suffix = "gate_up_proj";
  for (const std::string& name : ckpt.names()) {
    const size_t at = name.find(kExperts);
    if (at == std::string::npos || name.size() != at + std::strlen(kExperts) + suffix.size() ||
        name.compare(at + std::strlen(kExperts), suffix.size(), suffix) != 0)
      continue;
    const Shape s = ckpt.shape(name);
    BB_CHECK(s.size() == 3, "checkpoint ", ckpt.dir(), ": '", name, "' has shape ", shape_str(s),
             ", expected [experts, 2 x moe_intermediate, hidden]");
    out[name.substr(0, at + std::strlen(kExperts))] = s[0];
  }
  return out;
}

FusedExpertSink::FusedExpertSink(std::map<std::string, int64_t> fused_layers, WeightSink out) : out_(std::move(out)) {
  for (const auto& [prefix, experts] : fused_layers) layers_[prefix] = Pending{experts, {}};
}

void FusedExpertSink::operator()(const std::string& name, const Tensor& t) {
  const size_t at = name.find(kExperts);
  if (at != std::string::npos) {
    const std::string prefix = name.substr(0, at + std::strlen(kExperts));
    auto layer = layers_.find(prefix);
    const std::string weight = ".weight";
    if (layer != layers_.end() && name.size() > prefix.size() + weight.size() &&
        name.compare(name.size() - weight.size(), weight.size(), weight) == 0) {
      BB_CHECK(layer->second.num_experts > 0, "fused export: '", name, "' arrived after its layer was written");
      const std::string key = name.substr(prefix.size(), name.size() - prefix.size() - weight.size());
      BB_CHECK(layer->second.parts.emplace(key, t.to(Device::cpu()).clone()).second, "fused export: '", name,
               "' arrived twice");
      if (int64_t(layer->second.parts.size()) == 3 * layer->second.num_experts) emit(prefix, layer->second);
      return;
    }
  }
  out_(name, t);
}

void FusedExpertSink::emit(const std::string& prefix, Pending& layer) {
  std::vector<const Tensor*> gate_up, down;
  for (int64_t e = 0; e < layer.num_experts; ++e)
    for (const char* proj : kProjs) {
      auto it = layer.parts.find(part_key(e, proj));
      BB_CHECK(it != layer.parts.end(), "fused export: '", prefix, part_key(e, proj),
               ".weight' is missing among the layer's ", layer.parts.size(), " expert tensors");
      (std::strcmp(proj, "down_proj") == 0 ? down : gate_up).push_back(&it->second);
    }
  const Shape g = gate_up.front()->shape(), d = down.front()->shape();
  BB_CHECK(g.size() == 2 && d.size() == 2, "fused export of ", prefix, ": expert tensors must be matrices");
  out_(prefix + "gate_up_proj", stacked(gate_up, {layer.num_experts, 2 * g[0], g[1]}, prefix + "gate_up_proj"));
  out_(prefix + "down_proj", stacked(down, {layer.num_experts, d[0], d[1]}, prefix + "down_proj"));
  layer.parts.clear();
  layer.num_experts = -layer.num_experts;   // written; operator() refuses later tensors of the layer
}

void FusedExpertSink::finish() const {
  for (const auto& [prefix, layer] : layers_) {
    if (layer.num_experts < 0) continue;
    for (int64_t e = 0; e < layer.num_experts; ++e)
      for (const char* proj : kProjs)
        BB_CHECK(layer.parts.count(part_key(e, proj)), "fused export: the source stores ", prefix,
                 "gate_up_proj fused, but the model exported no '", prefix, part_key(e, proj), ".weight'");
  }
}

}  // namespace bb
