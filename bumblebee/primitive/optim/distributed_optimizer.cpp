// DistributedOptimizer step.
#include "bumblebee/primitive/optim/distributed_optimizer.h"

#include <cmath>

namespace bb {

DistributedOptimizer::DistributedOptimizer(ParamStore& store, dist::ParallelState& parallel, const AdamWConfig& cfg)
    : store_(&store), parallel_(&parallel), cfg_(cfg), reducer_(store, parallel.dp()) {
  const int64_t shard_len = reducer_.shard_numel();
  const DType pdt = store.flat_params().dtype();
  const DType master_dt = pdt == DType::F64 ? DType::F64 : DType::F32;
  master_is_param_ = parallel.dp_size() == 1 && master_dt == pdt;
  const Device dev = store.flat_params().device();
  if (master_is_param_) {
    master_ = store.flat_params();
  } else {
    master_ = Tensor::empty({shard_len}, master_dt, dev);
    reload_master_from_params();
  }
  exp_avg_ = Tensor::zeros({shard_len}, master_dt, dev);
  exp_avg_sq_ = Tensor::zeros({shard_len}, master_dt, dev);
  const bool skip_replicated = parallel.tp_size() > 1 && parallel.tp_rank() != 0;
  padding_in_shard_ = shard_len;
  for (const GradReducer::Slice& s : reducer_.slices()) {
    for (const Parameter& p : store.params()) {
      const int64_t b = std::max(p.offset, s.flat_begin);
      const int64_t e = std::min(p.offset + shape_numel(p.local_shape), s.flat_begin + s.numel);
      if (b >= e) continue;
      padding_in_shard_ -= e - b;
      const int64_t to_shard = s.shard_begin - s.flat_begin;
      if (skip_replicated && p.replicated_over_tp()) replicated_ranges_.emplace_back(b + to_shard, e + to_shard);
    }
  }
}

void DistributedOptimizer::reload_master_from_params() {
  if (master_is_param_) return;
  for (const GradReducer::Slice& s : reducer_.slices())
    master_.narrow(s.shard_begin, s.numel).copy_from(store_->flat_params().narrow(s.flat_begin, s.numel));
}

double DistributedOptimizer::grad_norm_squared(const Tensor& shard_grad) {
  // Replicated parameters hold the same gradient on every tp rank: count them on tp rank 0 only.
  double local = ops::sum_squares(shard_grad);
  for (const auto& [b, e] : replicated_ranges_) local -= ops::sum_squares(shard_grad.narrow(b, e - b));
  return parallel_->world().all_reduce_scalar(local);
}

void DistributedOptimizer::all_gather_params() {
  Tensor& flat_params = store_->flat_params();
  if (parallel_->dp_size() == 1) {
    if (!master_is_param_) flat_params.copy_from(master_);
    return;
  }
  Tensor shard = Tensor::empty({reducer_.shard_numel()}, flat_params.dtype(), flat_params.device());
  shard.copy_from(master_);
  const int64_t dp = parallel_->dp_size();
  for (const GradReducer::Slice& s : reducer_.slices()) {
    // The bucket this slice belongs to starts dp_rank slices before it.
    Tensor bucket = flat_params.narrow(s.flat_begin - parallel_->dp_rank() * s.numel, s.numel * dp);
    parallel_->dp().all_gather(shard.narrow(s.shard_begin, s.numel), bucket);
  }
}

OptimizerStepResult DistributedOptimizer::step(double lr) {
  const Tensor& shard_grad = reducer_.reduced_grads();
  OptimizerStepResult r;
  const double norm_sq = grad_norm_squared(shard_grad);
  r.grad_norm = std::sqrt(norm_sq);
  const double zeros = double(ops::count_zeros(shard_grad) - padding_in_shard_);
  r.num_zeros_in_grad = int64_t(parallel_->world().all_reduce_scalar(zeros));
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
  all_gather_params();
  r.update_successful = true;
  return r;
}

}  // namespace bb
