// ExpertLora: per-expert LoRA factors and their grouped GEMMs.
#include "bumblebee/primitive/modules/moe/expert_lora.h"

#include "bumblebee/ops/ops.h"

namespace bb {

ExpertLora::ExpertLora(ParamStore& store, const std::string& prefix, const std::string& param, int64_t first,
                       int64_t count, int64_t in, int64_t out, const LoraConfig& cfg)
    : scaling_(cfg.scaling()) {
  const int64_t r = cfg.rank;
  BB_CHECK(r <= std::min(in, out), "peft.rank ", r, " is larger than the expert weight '", prefix, "*.", param,
           "' of shape [", out, ", ", in, "] allows (at most min(in, out) = ", std::min(in, out), ")");
  for (int64_t e = first; e < first + count; ++e) {
    const std::string stem = prefix + std::to_string(e) + "." + param;
    a_.push_back(&store.add(stem + ".lora_A.weight", {r, in}, {}, InitKind::KaimingUniform, ParamClass::Expert));
    b_.push_back(&store.add(stem + ".lora_B.weight", {out, r}, {}, InitKind::Zeros, ParamClass::Expert));
  }
}

std::vector<Tensor> ExpertLora::values(const std::vector<Parameter*>& ps) const {
  std::vector<Tensor> v;
  for (const Parameter* p : ps) v.push_back(p->value);
  return v;
}

void ExpertLora::forward(const Tensor& x, const std::vector<int64_t>& offsets, Tensor& y) const {
  Tensor u = Tensor::empty({x.size(0), a_.front()->value.size(0)}, x.dtype(), x.device());
  ops::grouped_gemm(x, values(a_), true, offsets, u);
  ops::grouped_gemm(u, values(b_), true, offsets, y, scaling_, 1.0);
}

void ExpertLora::backward(const Tensor& dy, const Tensor& x, const std::vector<int64_t>& offsets, Tensor& dx) {
  const int64_t n = x.size(0), r = a_.front()->value.size(0);
  const std::vector<Tensor> a = values(a_);
  Tensor g = Tensor::empty({n, r}, dy.dtype(), dy.device());   // dy B_e
  ops::grouped_gemm(dy, values(b_), false, offsets, g);
  // The adapters of a block share one parameter group: all are frozen or none.
  if (b_.front()->requires_grad()) {
    Tensor u = Tensor::empty({n, r}, x.dtype(), x.device());
    ops::grouped_gemm(x, a, true, offsets, u);
    std::vector<Tensor> da, db;
    for (size_t e = 0; e < a_.size(); ++e) {
      da.push_back(a_[e]->grad);
      db.push_back(b_[e]->grad);
    }
    ops::grouped_gemm_weight_grad(dy, u, offsets, db, scaling_, grad_write_beta(b_));
    ops::grouped_gemm_weight_grad(g, x, offsets, da, scaling_, grad_write_beta(a_));
  }
  ops::grouped_gemm(g, a, false, offsets, dx, scaling_, 1.0);
}

}  // namespace bb
