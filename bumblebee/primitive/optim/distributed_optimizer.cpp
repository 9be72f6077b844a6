// DistributedOptimizer step.
#include "bumblebee/primitive/optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

namespace bb {

DistributedOptimizer::DistributedOptimizer(ParamStore& store, dist::ParallelState& parallel, const AdamWConfig& cfg)
    : DistributedOptimizer(std::vector<ParamStore*>{&store}, parallel, cfg, {}) {}

DistributedOptimizer::DistributedOptimizer(const std::vector<ParamStore*>& stores, dist::ParallelState& parallel,
                                           const AdamWConfig& cfg,
                                           const std::vector<const Parameter*>& counted_elsewhere)
    : parallel_(&parallel), cfg_(cfg) {
  // Dense parameters are split over tp, expert parameters over etp (each
  // expert lives on one ep rank, so ep never replicates one).
  const bool skip_replicated = parallel.tp_size() > 1 && parallel.tp_rank() != 0;
  const bool skip_replicated_expert = parallel.etp_size() > 1 && parallel.etp_rank() != 0;
  auto not_counted_here = [&](const Parameter* p) {
    const bool skip = p->cls == ParamClass::Expert ? skip_replicated_expert : skip_replicated;
    return (skip && p->replicated_over_tp()) ||
           std::find(counted_elsewhere.begin(), counted_elsewhere.end(), p) != counted_elsewhere.end();
  };
  std::vector<std::pair<int, ParamGroup*>> all_groups;   // (store index, group), in store then group order
  for (size_t si = 0; si < stores.size(); ++si)
    for (auto& group : stores[si]->groups()) all_groups.emplace_back(int(si), group.get());
  for (const auto& [store_index, group] : all_groups) {
    if (!group->trainable()) continue;
    GroupState g;
    g.group = group;
    g.store_index = store_index;
    g.comm = group->spec().grad_comm ? group->spec().grad_comm : &parallel.dp();
    BB_CHECK(group->spec().grad_comm || parallel.dp_size() == 1, "parameter group '", group->name(),
             "' has no gradient communicator, but dp is ", parallel.dp_size());
    g.reducer = std::make_unique<GradReducer>(*group, *g.comm);
    const int64_t shard_len = g.reducer->shard_numel();
    const DType pdt = group->flat_params().dtype();
    const DType master_dt = pdt == DType::F64 ? DType::F64 : DType::F32;
    g.master_is_param = g.comm->size() == 1 && master_dt == pdt;
    const Device dev = group->flat_params().device();
    g.master = g.master_is_param ? group->flat_params() : Tensor::empty({shard_len}, master_dt, dev);
    g.exp_avg = Tensor::zeros({shard_len}, master_dt, dev);
    g.exp_avg_sq = Tensor::zeros({shard_len}, master_dt, dev);
    g.padding_in_shard = shard_len;
    for (const GradReducer::Slice& s : g.reducer->slices()) {
      for (const Parameter* p : group->params()) {
        const int64_t b = std::max(p->offset, s.flat_begin);
        const int64_t e = std::min(p->offset + shape_numel(p->local_shape), s.flat_begin + s.numel);
        if (b >= e) continue;
        g.padding_in_shard -= e - b;
        const int64_t to_shard = s.shard_begin - s.flat_begin;
        if (not_counted_here(p)) g.replicated_ranges.emplace_back(b + to_shard, e + to_shard);
      }
    }
    groups_.push_back(std::move(g));
  }
  reload_master_from_params();
}

std::vector<Tensor> DistributedOptimizer::state_tensors() const {
  std::vector<Tensor> out;
  for (const GroupState& g : groups_) {
    if (!g.master_is_param) out.push_back(g.master);
    out.push_back(g.exp_avg);
    out.push_back(g.exp_avg_sq);
  }
  return out;
}

std::vector<Tensor> DistributedOptimizer::grad_shards() const {
  std::vector<Tensor> out;
  for (const GroupState& g : groups_) out.push_back(g.reducer->shard());
  return out;
}

void DistributedOptimizer::reload_master_from_params() {
  for (GroupState& g : groups_) {
    if (g.master_is_param) continue;
    for (const GradReducer::Slice& s : g.reducer->slices())
      g.master.narrow(s.shard_begin, s.numel).copy_from(g.group->flat_params().narrow(s.flat_begin, s.numel));
  }
}

namespace {
Tensor& state_of(DistributedOptimizer::GroupState& g, DistributedOptimizer::State which) {
  using State = DistributedOptimizer::State;
  return which == State::Master ? g.master : which == State::ExpAvg ? g.exp_avg : g.exp_avg_sq;
}
}  // namespace

Tensor DistributedOptimizer::gather_state(GroupState& g, State which) {
  const Tensor& shard = state_of(g, which);
  Tensor full = Tensor::zeros({g.group->flat_params().numel()}, shard.dtype(), shard.device());
  const int64_t ranks = g.comm->size();
  for (const GradReducer::Slice& s : g.reducer->slices()) {
    Tensor bucket = full.narrow(s.flat_begin - g.comm->rank() * s.numel, s.numel * ranks);
    if (ranks == 1) {
      bucket.copy_from(shard.narrow(s.shard_begin, s.numel));
    } else {
      g.comm->all_gather(shard.narrow(s.shard_begin, s.numel), bucket);
    }
  }
  return full;
}

void DistributedOptimizer::scatter_state(GroupState& g, State which, const Tensor& full) {
  Tensor& shard = state_of(g, which);
  BB_CHECK(full.numel() == g.group->flat_params().numel(), "optimizer state of group '", g.group->name(), "' has ",
           full.numel(), " elements, the group ", g.group->flat_params().numel());
  for (const GradReducer::Slice& s : g.reducer->slices())
    shard.narrow(s.shard_begin, s.numel).copy_from(full.narrow(s.flat_begin, s.numel));
}

void DistributedOptimizer::invalidate_grads() {
  for (GroupState& g : groups_) g.reducer->invalidate();
}

void DistributedOptimizer::grad_ready(const Parameter& p) {
  for (GroupState& g : groups_) {
    if (g.group != p.group) continue;
    g.reducer->grad_ready(p);
    return;
  }
  BB_FAIL("parameter '", p.name, "' reported ready, but its group is not trained by this optimizer");
}

void DistributedOptimizer::check_all_reported() const {
  for (const GroupState& g : groups_) g.reducer->check_all_reported();
}

double DistributedOptimizer::grad_norm_squared() {
  // Each element of a group's shard lives on one rank of the group's
  // communicator and one rank of the model-parallel groups that split it, so
  // the world sum counts it once, but for tp-replicated parameters, which
  // every tp rank holds: those count on tp rank 0 only.
  double local = 0;
  for (GroupState& g : groups_) {
    const Tensor& shard = g.reducer->reduced_grads();
    local += ops::sum_squares(shard);
    for (const auto& [b, e] : g.replicated_ranges) local -= ops::sum_squares(shard.narrow(b, e - b));
  }
  return parallel_->world().all_reduce_scalar(local);
}

void DistributedOptimizer::all_gather_params(GroupState& g) {
  Tensor& flat_params = g.group->flat_params();
  if (g.comm->size() == 1) {
    if (!g.master_is_param) flat_params.copy_from(g.master);
    return;
  }
  Tensor shard = Tensor::empty({g.reducer->shard_numel()}, flat_params.dtype(), flat_params.device());
  shard.copy_from(g.master);
  const int64_t ranks = g.comm->size();
  for (const GradReducer::Slice& s : g.reducer->slices()) {
    // The bucket this slice belongs to starts comm-rank slices before it.
    Tensor bucket = flat_params.narrow(s.flat_begin - g.comm->rank() * s.numel, s.numel * ranks);
    g.comm->all_gather(shard.narrow(s.shard_begin, s.numel), bucket);
  }
}

OptimizerStepResult DistributedOptimizer::step(double lr) {
  OptimizerStepResult r;
  r.grad_norm = std::sqrt(grad_norm_squared());
  // Counted like the norm: each element once (not a tp-replicated parameter's
  // copies off tp rank 0, nor a tied embedding's last-stage copy).
  double zeros = 0;
  for (GroupState& g : groups_) {
    const Tensor& shard = g.reducer->reduced_grads();
    zeros += double(ops::count_zeros(shard) - g.padding_in_shard);
    for (const auto& [b, e] : g.replicated_ranges) zeros -= double(ops::count_zeros(shard.narrow(b, e - b)));
  }
  r.num_zeros_in_grad = int64_t(parallel_->world().all_reduce_scalar(zeros));
  if (!std::isfinite(r.grad_norm)) return r;   // skipped update: parameters and moments untouched

  ++step_;
  for (GroupState& g : groups_) {
    const ParamGroupSpec& spec = g.group->spec();
    ops::AdamWParams hp;
    hp.lr = lr * spec.lr_mult;
    hp.beta1 = cfg_.beta1;
    hp.beta2 = cfg_.beta2;
    hp.eps = cfg_.eps;
    hp.weight_decay = cfg_.weight_decay * spec.weight_decay_mult;
    hp.step = step_;
    // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below one.
    if (cfg_.clip_grad > 0) hp.grad_scale = std::min(1.0, cfg_.clip_grad / (r.grad_norm + 1e-6));
    ops::adamw_step(g.master, g.reducer->reduced_grads(), g.exp_avg, g.exp_avg_sq, hp);
    all_gather_params(g);
  }
  r.update_successful = true;
  return r;
}

}  // namespace bb
