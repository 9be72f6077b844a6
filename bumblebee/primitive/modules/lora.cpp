// LoRA configuration checks, adapter declaration, forward and backward.
#include "bumblebee/primitive/modules/lora.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/modules/parameter_init.h"

namespace bb {

double LoraConfig::scaling() const {
  return use_rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank);
}

namespace {
// "model.layers.0.self_attn.q_proj.weight" -> "q_proj"
std::string module_of(const std::string& weight_name) {
  const std::string stem = weight_name.substr(0, weight_name.rfind('.'));
  return stem.substr(stem.rfind('.') + 1);
}
}  // namespace

bool LoraConfig::targets(const std::string& weight_name) const {
  const std::string module = module_of(weight_name);
  for (const std::string& t : target_modules)
    if (t == module || (t == "all-linear" && module != "lm_head")) return true;
  return false;
}

const std::vector<std::string>& lora_linear_modules() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

void check_lora_config(const LoraConfig& cfg) {
  BB_CHECK(!cfg.target_modules.empty(), "peft.target_modules is empty; name the HF modules to adapt (",
           "e.g. q_proj,v_proj) or all-linear");
  const auto& valid = lora_linear_modules();
  for (const std::string& t : cfg.target_modules) {
    if (t == "all-linear" || std::find(valid.begin(), valid.end(), t) != valid.end()) continue;
    std::ostringstream list;
    for (const std::string& v : valid) list << v << ", ";
    BB_FAIL("peft.target_modules names '", t, "', which is no linear module of the model; valid: ", list.str(),
            "all-linear");
  }
  BB_CHECK(cfg.rank > 0, "peft.rank must be > 0, got ", cfg.rank);
  BB_CHECK(cfg.dropout == 0.0, "peft.dropout ", cfg.dropout, " is not supported yet; LoRA trains with dropout 0");
}

bool is_lora_param(const std::string& name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

std::string lora_param_name(const std::string& base_weight_name, const char* part) {
  const std::string stem = base_weight_name.substr(0, base_weight_name.rfind('.'));
  return stem + "." + part + ".weight";
}

void init_lora_params(ParamStore& store, uint64_t seed) {
  for (Parameter& p : store.params()) {
    if (!is_lora_param(p.name)) continue;
    if (p.init == InitKind::KaimingUniform)
      init_kaiming_uniform_shard(p, seed ^ std::hash<std::string>{}(p.name));
    else
      p.value.zero_();
  }
}

LoraAdapter::LoraAdapter(ParamStore& store, const Parameter& base, const LoraConfig& cfg, int tp_rank, int tp_size)
    : scaling_(cfg.scaling()) {
  const int64_t out = base.full_shape[0], in = base.full_shape[1], r = cfg.rank;
  BB_CHECK(r <= std::min(in, out), "peft.rank ", r, " is larger than the layer '", base.name, "' of shape ",
           shape_str(base.full_shape), " allows (at most min(in, out) = ", std::min(in, out), ")");
  const bool column = base.shard == ShardKind::Column;
  BB_CHECK(column || base.shard == ShardKind::Row, "LoRA on '", base.name, "' needs a column- or row-parallel weight");
  a_ = &store.add(lora_param_name(base.name, "lora_A"), {r, in},
                  {column ? ShardKind::Replicated : ShardKind::Row, tp_rank, tp_size}, InitKind::KaimingUniform);
  b_ = &store.add(lora_param_name(base.name, "lora_B"), {out, r},
                  {column ? ShardKind::Column : ShardKind::Replicated, tp_rank, tp_size}, InitKind::Zeros);
}

Tensor LoraAdapter::placed_b(int64_t width, int64_t col) const {
  const Tensor& b = b_->value;
  if (col == 0 && width == b.size(0)) return b;
  Tensor placed = Tensor::zeros({width, b.size(1)}, b.dtype(), b.device());
  Tensor rows = placed.narrow(col, b.size(0));
  rows.copy_from(b);
  return placed;
}

void LoraAdapter::forward(const Tensor& x, Tensor& y, int64_t col) const {
  Tensor u = Tensor::empty({x.size(0), a_->value.size(0)}, x.dtype(), x.device());
  ops::matmul(x, false, a_->value, true, u);
  ops::matmul(u, false, placed_b(y.size(1), col), true, y, scaling_, 1.0);
}

void LoraAdapter::backward(const Tensor& dy, const Tensor& x, Tensor& dx, int64_t col) {
  const int64_t T = x.size(0), r = a_->value.size(0), out = b_->value.size(0);
  Tensor u = Tensor::empty({T, r}, x.dtype(), x.device());
  ops::matmul(x, false, a_->value, true, u);
  Tensor b = placed_b(dy.size(1), col);
  Tensor g = Tensor::empty({T, r}, dy.dtype(), dy.device());   // dy B
  ops::matmul(dy, false, b, false, g);
  if (b_->requires_grad()) {
    if (b.shares_storage(b_->value)) {
      ops::matmul(dy, true, u, false, b_->grad, scaling_, 1.0);
    } else {
      Tensor d_placed = Tensor::empty(b.shape(), b_->grad.dtype(), dy.device());
      ops::matmul(dy, true, u, false, d_placed);
      ops::add_(b_->grad, d_placed.narrow(col, out), scaling_);
    }
  }
  if (a_->requires_grad()) ops::matmul(g, true, x, false, a_->grad, scaling_, 1.0);
  ops::matmul(g, false, a_->value, false, dx, scaling_, 1.0);
}

}  // namespace bb
