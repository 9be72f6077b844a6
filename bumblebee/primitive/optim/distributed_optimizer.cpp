// DistributedOptimizer step.
#include "bumblebee/primitive/optim/distributed_optimizer.h"

#include <cmath>

namespace bb {

DistributedOptimizer::DistributedOptimizer(ParamStore& store, dist::ParallelState& parallel, const AdamWConfig& cfg)
    : store_(&store), parallel_(&parallel), cfg_(cfg) {
  BB_CHECK(store.allocated(), "optimizer built before the parameter buffer");
  const int64_t total = store.flat_params().numel();
  const int64_t dp = parallel.dp_size();
  BB_CHECK(total % dp == 0, "flat parameter buffer of ", total, " elements is not padded to dp ", dp);
  shard_len_ = total / dp;
  shard_begin_ = parallel.dp_rank() * shard_len_;
  const DType pdt = store.flat_params().dtype();
  const DType master_dt = pdt == DType::F64 ? DType::F64 : DType::F32;
  master_is_param_ = dp == 1 && master_dt == pdt;
  const Device dev = store.flat_params().device();
  if (master_is_param_) {
    master_ = shard_of(store.flat_params());
  } else {
    master_ = Tensor::empty({shard_len_}, master_dt, dev);
    reload_master_from_params();
  }
  exp_avg_ = Tensor::zeros({shard_len_}, master_dt, dev);
  exp_avg_sq_ = Tensor::zeros({shard_len_}, master_dt, dev);
  if (parallel.tp_size() > 1 && parallel.tp_rank() != 0) {
    for (const Parameter& p : store.params()) {
      if (!p.replicated_over_tp()) continue;
      const int64_t b = std::max(p.offset, shard_begin_);
      const int64_t e = std::min(p.offset + shape_numel(p.local_shape), shard_begin_ + shard_len_);
      if (b < e) replicated_ranges_.emplace_back(b - shard_begin_, e - shard_begin_);
    }
  }
}

void DistributedOptimizer::reload_master_from_params() {
  if (!master_is_param_) master_.copy_from(shard_of(store_->flat_params()));
}

double DistributedOptimizer::grad_norm_squared(const Tensor& shard_grad) {
  // Replicated parameters hold the same gradient on every tp rank: count them on tp rank 0 only.
  double local = ops::sum_squares(shard_grad);
  for (const auto& [b, e] : replicated_ranges_) local -= ops::sum_squares(shard_grad.narrow(b, e - b));
  return parallel_->world().all_reduce_scalar(local);
}

OptimizerStepResult DistributedOptimizer::step(double lr) {
  Tensor& flat_grads = store_->flat_grads();
  Tensor shard_grad;
  if (parallel_->dp_size() > 1) {
    shard_grad = Tensor::empty({shard_len_}, flat_grads.dtype(), flat_grads.device());
    parallel_->dp().reduce_scatter(flat_grads, shard_grad);
  } else {
    shard_grad = shard_of(flat_grads);
  }
  OptimizerStepResult r;
  const double norm_sq = grad_norm_squared(shard_grad);
  r.grad_norm = std::sqrt(norm_sq);
  r.num_zeros_in_grad = int64_t(parallel_->world().all_reduce_scalar(double(ops::count_zeros(shard_grad))));
  if (!std::isfinite(r.grad_norm)) return r;   // skipped update: parameters and moments untouched

  ops::AdamWParams hp;
  hp.lr = lr;
  hp.beta1 = cfg_.beta1;
  hp.beta2 = cfg_.beta2;
  hp.eps = cfg_.eps;
  hp.weight_decay = cfg_.weight_decay;
  hp.step = ++step_;
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below one.
  if (cfg_.clip_grad > 0) hp.grad_scale = std::min(1.0, cfg_.clip_grad / (r.grad_norm + 1e-6));
  ops::adamw_step(master_, shard_grad, exp_avg_, exp_avg_sq_, hp);

  Tensor& flat_params = store_->flat_params();
  if (parallel_->dp_size() > 1) {
    Tensor shard = Tensor::empty({shard_len_}, flat_params.dtype(), flat_params.device());
    shard.copy_from(master_);
    parallel_->dp().all_gather(shard, flat_params);
  } else if (!master_is_param_) {
    Tensor shard = shard_of(flat_params);
    shard.copy_from(master_);
  }
  r.update_successful = true;
  return r;
}

}  // namespace bb
