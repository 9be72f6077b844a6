// LoRA and DoRA configuration checks, adapter declaration, forward and backward.
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

namespace {
// "gate_up_proj" matches "gate_up_proj", "experts.gate_up_proj" and "mlp.experts.gate_up_proj".
bool names_expert_parameter(const std::string& target, const std::string& full) {
  return full == target || full.ends_with("." + target);
}
}  // namespace

bool LoraConfig::targets_expert_parameter(const std::string& param) const {
  for (const std::string& t : target_parameters)
    if (t.ends_with(param) && names_expert_parameter(t, "mlp.experts." + param)) return true;
  return false;
}

const std::vector<std::string>& lora_expert_parameters() {
  static const std::vector<std::string> names = {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return names;
}

const std::vector<std::string>& lora_linear_modules() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

void check_lora_config(const LoraConfig& cfg) {
  BB_CHECK(!cfg.target_modules.empty() || !cfg.target_parameters.empty(),
           "peft.target_modules and peft.target_parameters are empty; name the HF modules to adapt (",
           "e.g. q_proj,v_proj) or all-linear, or the expert weights (mlp.experts.gate_up_proj)");
  const auto& valid = lora_linear_modules();
  for (const std::string& t : cfg.target_modules) {
    if (t == "all-linear" || std::find(valid.begin(), valid.end(), t) != valid.end()) continue;
    std::ostringstream list;
    for (const std::string& v : valid) list << v << ", ";
    BB_FAIL("peft.target_modules names '", t, "', which is no linear module of the model; valid: ", list.str(),
            "all-linear");
  }
  for (const std::string& t : cfg.target_parameters) {
    bool known = false;
    for (const std::string& v : lora_expert_parameters()) known = known || names_expert_parameter(t, v);
    BB_CHECK(known, "peft.target_parameters names '", t, "', which is no expert weight of the model; valid: ",
             "mlp.experts.gate_up_proj, mlp.experts.down_proj");
  }
  // peft's ParamWrapper (target_parameters) cannot factor x out of B A dropout(x), nor take DoRA.
  BB_CHECK(cfg.target_parameters.empty() || (cfg.dropout == 0.0 && !cfg.use_dora),
           "peft.target_parameters (LoRA on the expert weights) needs peft.type=lora and peft.dropout=0, as HF ",
           "peft's ParamWrapper does; got peft.type=", cfg.use_dora ? "dora" : "lora", ", peft.dropout ",
           cfg.dropout);
  BB_CHECK(cfg.rank > 0, "peft.rank must be > 0, got ", cfg.rank);
  BB_CHECK(cfg.dropout >= 0.0 && cfg.dropout < 1.0, "peft.dropout must be in [0, 1), got ", cfg.dropout);
  // peft's DoRA with dropout adds (g - 1) W dropout(x) to the undropped base
  // output, a second base-sized GEMM on another input; not built.
  BB_CHECK(cfg.dropout == 0.0 || !cfg.use_dora, "peft.dropout ", cfg.dropout,
           " with peft.type=dora is not supported; DoRA trains with peft.dropout=0");
}

bool is_lora_param(const std::string& name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight") ||
         name.ends_with(".lora_magnitude_vector");
}

std::string lora_param_name(const std::string& base_weight_name, const char* part) {
  const std::string stem = base_weight_name.substr(0, base_weight_name.rfind('.'));
  return stem + "." + part + ".weight";
}

std::string dora_magnitude_name(const std::string& base_weight_name) {
  return base_weight_name.substr(0, base_weight_name.rfind('.')) + ".lora_magnitude_vector";
}

namespace {
Tensor ones(const Shape& shape, DType dtype, Device dev) {
  return Tensor::from_doubles(std::vector<double>(size_t(shape_numel(shape)), 1.0), shape, dtype).to(dev);
}
}  // namespace

// Row sums of squares as one GEMM, (V * V) 1, so the op set needs no new reduction.
std::vector<double> dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, double s,
                                     TensorParallel* row_reduce) {
  Tensor v = w.clone();
  ops::matmul(b, false, a, false, v, s, 1.0);
  Tensor sq = Tensor::empty(v.shape(), v.dtype(), v.device());
  ops::mul(v, v, sq);
  Tensor sums = Tensor::empty({v.size(0), 1}, v.dtype(), v.device());
  ops::matmul(sq, false, ones({v.size(1), 1}, v.dtype(), v.device()), false, sums);
  if (row_reduce && row_reduce->size() > 1) row_reduce->group().all_reduce(sums);
  std::vector<double> norm = sums.to_doubles();
  for (double& n : norm) n = std::sqrt(n);
  return norm;
}

void init_dora_magnitudes(ParamStore& store, TensorParallel& tp) {
  const LoraConfig* cfg = store.lora();
  if (!cfg || !cfg->use_dora) return;
  for (Parameter& m : store.params()) {
    if (!m.name.ends_with(".lora_magnitude_vector")) continue;
    const std::string stem = m.name.substr(0, m.name.rfind('.'));
    const Parameter* w = store.find(stem + ".weight");
    const Parameter* a = store.find(stem + ".lora_A.weight");
    const Parameter* b = store.find(stem + ".lora_B.weight");
    BB_CHECK(w && a && b, "DoRA magnitude '", m.name, "' lacks its base weight or lora_A/lora_B");
    const std::vector<double> norm =
        dora_weight_norm(w->value, a->value, b->value, cfg->scaling(), w->shard == ShardKind::Row ? &tp : nullptr);
    m.value.copy_from(Tensor::from_doubles(norm, m.value.shape(), m.value.dtype()).to(m.value.device()));
  }
}

void init_lora_params(ParamStore& store, uint64_t seed) {
  for (Parameter& p : store.params()) {
    if (!is_lora_param(p.name) || p.name.ends_with(".lora_magnitude_vector")) continue;
    if (p.init == InitKind::KaimingUniform)
      init_kaiming_uniform_shard(p, seed ^ std::hash<std::string>{}(p.name));
    else
      p.value.zero_();
  }
}

LoraAdapter::LoraAdapter(ParamStore& store, const Parameter& base, const LoraConfig& cfg, TensorParallel& tp)
    : base_(&base), scaling_(cfg.scaling()), dropout_(cfg.dropout) {
  const int tp_rank = tp.rank(), tp_size = tp.size();
  const int64_t out = base.full_shape[0], in = base.full_shape[1], r = cfg.rank;
  BB_CHECK(r <= std::min(in, out), "peft.rank ", r, " is larger than the layer '", base.name, "' of shape ",
           shape_str(base.full_shape), " allows (at most min(in, out) = ", std::min(in, out), ")");
  const bool column = base.shard == ShardKind::Column;
  BB_CHECK(column || base.shard == ShardKind::Row, "LoRA on '", base.name, "' needs a column- or row-parallel weight");
  if (!column) in_offset_ = int64_t(tp_rank) * (in / tp_size);
  a_ = &store.add(lora_param_name(base.name, "lora_A"), {r, in},
                  {column ? ShardKind::Replicated : ShardKind::Row, tp_rank, tp_size}, InitKind::KaimingUniform);
  b_ = &store.add(lora_param_name(base.name, "lora_B"), {out, r},
                  {column ? ShardKind::Column : ShardKind::Replicated, tp_rank, tp_size}, InitKind::Zeros);
  if (cfg.use_dora) {
    m_ = &store.add(dora_magnitude_name(base.name), {out},
                    {column ? ShardKind::Column : ShardKind::Replicated, tp_rank, tp_size}, InitKind::Ones);
    if (!column) row_reduce_ = &tp;
  }
}

Tensor LoraAdapter::placed_direction(int64_t width, int64_t col, std::vector<double>& norm) const {
  const Tensor& w = base_->value;
  norm = dora_weight_norm(w, a_->value, b_->value, scaling_, row_reduce_);
  Tensor placed = Tensor::zeros({width, w.size(1)}, w.dtype(), w.device());
  Tensor rows = placed.narrow(col, w.size(0));
  rows.copy_from(w);
  ops::matmul(b_->value, false, a_->value, false, rows, scaling_, 1.0);
  return placed;
}

// The broadcast is a rank-1 GEMM, 1 [T, 1] times g [1, width], for the same reason.
Tensor LoraAdapter::placed_scale(int64_t tokens, int64_t width, int64_t col, const std::vector<double>& norm) const {
  std::vector<double> g(size_t(width), 1.0);
  const std::vector<double> m = m_->value.to_doubles();
  for (size_t j = 0; j < m.size(); ++j) g[size_t(col) + j] = m[j] / norm[j];
  const Tensor& w = base_->value;
  Tensor row = Tensor::from_doubles(g, {1, width}, w.dtype()).to(w.device());
  Tensor scale = Tensor::empty({tokens, width}, w.dtype(), w.device());
  ops::matmul(ones({tokens, 1}, w.dtype(), w.device()), false, row, false, scale);
  return scale;
}

Tensor LoraAdapter::placed_b(int64_t width, int64_t col) const {
  const Tensor& b = b_->value;
  if (col == 0 && width == b.size(0)) return b;
  Tensor placed = Tensor::zeros({width, b.size(1)}, b.dtype(), b.device());
  Tensor rows = placed.narrow(col, b.size(0));
  rows.copy_from(b);
  return placed;
}

Tensor LoraAdapter::adapter_input(const Tensor& x, const LoraDropout& drop) const {
  if (!dropping(drop)) return x;
  return lora_dropout_input(x, dropout_, drop, base_->name, base_->full_shape[1], in_offset_);
}

void LoraAdapter::forward(const Tensor& x_in, Tensor& y, int64_t col, const LoraDropout& drop) const {
  const Tensor x = adapter_input(x_in, drop);
  Tensor u = Tensor::empty({x.size(0), a_->value.size(0)}, x.dtype(), x.device());
  ops::matmul(x, false, a_->value, true, u);
  ops::matmul(u, false, placed_b(y.size(1), col), true, y, scaling_, 1.0);
  if (!m_) return;
  const std::vector<double> norm = dora_weight_norm(base_->value, a_->value, b_->value, scaling_, row_reduce_);
  ops::mul(y, placed_scale(y.size(0), y.size(1), col, norm), y);
}

Tensor LoraAdapter::output_grad(const Tensor& dy, const Tensor& x, int64_t col) {
  if (!m_) return dy;
  const int64_t T = dy.size(0), width = dy.size(1), out = m_->value.size(0);
  std::vector<double> norm;
  const Tensor v = placed_direction(width, col, norm);
  if (m_->requires_grad()) {
    Tensor z = Tensor::empty({T, width}, dy.dtype(), dy.device());
    ops::matmul(x, false, v, true, z);
    ops::mul(dy, z, z);
    Tensor col_sums = Tensor::empty({width, 1}, dy.dtype(), dy.device());
    ops::matmul(z, true, ones({T, 1}, dy.dtype(), dy.device()), false, col_sums);
    std::vector<double> dm = col_sums.narrow(col, out).to_doubles();
    for (int64_t j = 0; j < out; ++j) dm[size_t(j)] /= norm[size_t(j)];
    ops::add_(grad_to_accumulate(*m_), Tensor::from_doubles(dm, {out}, m_->grad.dtype()).to(dy.device()));
  }
  Tensor dz = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  ops::mul(dy, placed_scale(T, width, col, norm), dz);
  return dz;
}

void LoraAdapter::backward(const Tensor& dy, const Tensor& x_in, Tensor& dx, int64_t col, const LoraDropout& drop) {
  const Tensor x = adapter_input(x_in, drop);
  const int64_t T = x.size(0), r = a_->value.size(0), out = b_->value.size(0);
  Tensor u = Tensor::empty({T, r}, x.dtype(), x.device());
  ops::matmul(x, false, a_->value, true, u);
  Tensor b = placed_b(dy.size(1), col);
  Tensor g = Tensor::empty({T, r}, dy.dtype(), dy.device());   // dy B
  ops::matmul(dy, false, b, false, g);
  if (b_->requires_grad()) {
    if (b.shares_storage(b_->value)) {
      ops::matmul(dy, true, u, false, b_->grad, scaling_, grad_write_beta(*b_));
    } else {
      Tensor d_placed = Tensor::empty(b.shape(), b_->grad.dtype(), dy.device());
      ops::matmul(dy, true, u, false, d_placed);
      ops::add_(grad_to_accumulate(*b_), d_placed.narrow(col, out), scaling_);
    }
  }
  if (a_->requires_grad()) ops::matmul(g, true, x, false, a_->grad, scaling_, grad_write_beta(*a_));
  if (!dropping(drop)) {
    ops::matmul(g, false, a_->value, false, dx, scaling_, 1.0);
    return;
  }
  Tensor dx_adapter = Tensor::empty(dx.shape(), dx.dtype(), dx.device());
  ops::matmul(g, false, a_->value, false, dx_adapter, scaling_);
  lora_dropout_backward(dx_adapter, dropout_, drop, base_->name, base_->full_shape[1], in_offset_);
  ops::add_(dx, dx_adapter);
}

}  // namespace bb
