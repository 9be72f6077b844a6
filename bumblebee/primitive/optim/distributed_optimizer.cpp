// DistributedOptimizer step.
#include "bumblebee/primitive/optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "bumblebee/core/device_memory.h"

namespace bb {
namespace {
// The dtype AdamW updates the weights in: float64 on the float64 path, bf16
// when the bf16 parameters are their own master, else an fp32 master copy.
DType master_dtype(const AdamWConfig& cfg, DType param_dtype) {
  if (param_dtype == DType::F64) return DType::F64;
  return cfg.bf16_main_params ? DType::BF16 : DType::F32;
}

DType moment_dtype(bool bf16, DType master_dt) {
  return bf16 ? DType::BF16 : master_dt == DType::BF16 ? DType::F32 : master_dt;
}
}  // namespace

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
  const bool any_bf16_state = cfg.bf16_exp_avg || cfg.bf16_exp_avg_sq || cfg.bf16_main_params;
  BB_CHECK(!any_bf16_state || cfg.offload_fraction == 0.0, "optimizer.offload_fraction=", cfg.offload_fraction,
           " steps an fp32 state on the host; it does not take bf16 optimizer.exp_avg_dtype, ",
           "optimizer.exp_avg_sq_dtype or optimizer.main_params_dtype: set them to fp32 or offload_fraction=0");
  std::vector<std::pair<int, ParamGroup*>> all_groups;   // (store index, group), in store then group order
  for (size_t si = 0; si < stores.size(); ++si)
    for (auto& group : stores[si]->groups()) all_groups.emplace_back(int(si), group.get());
  std::vector<std::vector<int64_t>> piece_ends;   // per group, in shard order (optimizer_offload.h)
  std::vector<int64_t> bytes_per_element;
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
    for (const auto& [on, key] : {std::pair{cfg.bf16_exp_avg, "optimizer.exp_avg_dtype"},
                                  {cfg.bf16_exp_avg_sq, "optimizer.exp_avg_sq_dtype"},
                                  {cfg.bf16_main_params, "optimizer.main_params_dtype"}})
      BB_CHECK(!on || pdt == DType::BF16, key, "=bf16 needs bf16 parameters, but parameter group '", group->name(),
               "' is ", dtype_name(pdt), " (the float32/float64 paths keep their state in the parameter dtype)");
    const DType master_dt = master_dtype(cfg, pdt);
    g.master_is_param = g.comm->size() == 1 && master_dt == pdt;
    g.padding_in_shard = shard_len;
    std::vector<int64_t> ends;
    for (const GradReducer::Slice& s : g.reducer->slices()) {
      const int64_t to_shard = s.shard_begin - s.flat_begin;
      for (const Parameter* p : group->params()) {
        const int64_t b = std::max(p->offset, s.flat_begin);
        const int64_t e = std::min(p->offset + shape_numel(p->local_shape), s.flat_begin + s.numel);
        if (b >= e) continue;
        g.padding_in_shard -= e - b;
        ends.push_back(e + to_shard);
        if (not_counted_here(p)) g.replicated_ranges.emplace_back(b + to_shard, e + to_shard);
      }
      ends.push_back(s.shard_begin + s.numel);
    }
    std::sort(ends.begin(), ends.end());
    ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
    piece_ends.push_back(std::move(ends));
    // The host keeps its own master copy even when the device's is the parameters.
    bytes_per_element.push_back(int64_t(dtype_size(master_dt) + dtype_size(moment_dtype(cfg.bf16_exp_avg, master_dt)) +
                                        dtype_size(moment_dtype(cfg.bf16_exp_avg_sq, master_dt))));
    groups_.push_back(std::move(g));
  }
  const std::vector<int64_t> on_host = host_prefix_lengths(piece_ends, bytes_per_element, cfg.offload_fraction);
  for (size_t i = 0; i < groups_.size(); ++i) {
    GroupState& g = groups_[i];
    const Tensor& flat = g.group->flat_params();
    const DType master_dt = master_dtype(cfg, flat.dtype());
    const int64_t on_device = g.reducer->shard_numel() - on_host[i];
    g.master = g.master_is_param ? flat : Tensor::empty({on_device}, master_dt, flat.device());
    g.exp_avg = Tensor::zeros({on_device}, moment_dtype(cfg.bf16_exp_avg, master_dt), flat.device());
    g.exp_avg_sq = Tensor::zeros({on_device}, moment_dtype(cfg.bf16_exp_avg_sq, master_dt), flat.device());
    g.host = make_host_optimizer_state(on_host[i], master_dt, g.group->flat_grads().dtype(), flat.dtype(),
                                       flat.device());
    if (g.host.numel > 0 && !copies_) copies_ = std::make_unique<HostCopyStream>(flat.device());
  }
  // On a GPU node the host step shares the cores with one rank per GPU; a
  // CPU runtime's ops run on one thread, and so does its host part.
  if (copies_ && !groups_.front().group->flat_params().device().is_cpu())
    host_threads_ = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, cuda_device_count()));
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

namespace {
using State = DistributedOptimizer::State;
using GroupState = DistributedOptimizer::GroupState;

Tensor& state_of(GroupState& g, State which) {
  return which == State::Master ? g.master : which == State::ExpAvg ? g.exp_avg : g.exp_avg_sq;
}

Tensor& host_state_of(GroupState& g, State which) {
  return which == State::Master ? g.host.master : which == State::ExpAvg ? g.host.exp_avg : g.host.exp_avg_sq;
}

// Shard elements [host.numel, shard_len) of `which`: what steps on the device.
Tensor device_part(GroupState& g, State which) {
  Tensor& t = state_of(g, which);
  if (which == State::Master && g.master_is_param) return t.narrow(g.host.numel, t.numel() - g.host.numel);
  return t;
}

// Shard elements [begin, begin + src.numel()) of `which` <- src, split
// between the host prefix and the device part. A master that is the
// parameters takes the host range too, so the weights stay the master's.
void write_shard(GroupState& g, State which, int64_t begin, const Tensor& src) {
  const int64_t n = src.numel();
  const int64_t to_host = std::clamp<int64_t>(g.host.numel - begin, 0, n);
  if (to_host > 0) host_state_of(g, which).narrow(begin, to_host).copy_from(src.narrow(0, to_host));
  if (to_host < n)
    device_part(g, which).narrow(begin + to_host - g.host.numel, n - to_host).copy_from(src.narrow(to_host, n - to_host));
  if (to_host > 0 && which == State::Master && g.master_is_param)
    g.master.narrow(begin, to_host).copy_from(src.narrow(0, to_host));
}

// The whole shard of `which` on the group's device: the live buffer when no
// part is on the host, else a copy gathered from both parts.
Tensor device_shard(GroupState& g, State which) {
  const Tensor& dev = state_of(g, which);
  if (g.host.numel == 0 || (which == State::Master && g.master_is_param)) return dev;
  Tensor shard = Tensor::empty({g.reducer->shard_numel()}, dev.dtype(), dev.device());
  shard.narrow(0, g.host.numel).copy_from(host_state_of(g, which));
  shard.narrow(g.host.numel, dev.numel()).copy_from(dev);
  return shard;
}
}  // namespace

void DistributedOptimizer::reload_master_from_params() {
  for (GroupState& g : groups_) {
    if (g.master_is_param) {
      // One rank: the shard is the flat buffer, so its host prefix is the buffer's.
      if (g.host.numel > 0) g.host.master.copy_from(g.master.narrow(0, g.host.numel));
      continue;
    }
    for (const GradReducer::Slice& s : g.reducer->slices())
      write_shard(g, State::Master, s.shard_begin, g.group->flat_params().narrow(s.flat_begin, s.numel));
  }
}

Tensor DistributedOptimizer::gather_state(GroupState& g, State which) {
  const Tensor shard = device_shard(g, which);
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
  BB_CHECK(full.numel() == g.group->flat_params().numel(), "optimizer state of group '", g.group->name(), "' has ",
           full.numel(), " elements, the group ", g.group->flat_params().numel());
  for (const GradReducer::Slice& s : g.reducer->slices())
    write_shard(g, which, s.shard_begin, full.narrow(s.flat_begin, s.numel));
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

ops::SquaresAndZeros DistributedOptimizer::grad_norm_squared_and_zeros() {
  // Each element of a group's shard lives on one rank of the group's
  // communicator and one rank of the model-parallel groups that split it, so
  // the world sum counts it once, but for tp-replicated parameters, which
  // every tp rank holds: those count on tp rank 0 only (the zero count too,
  // and never the bucket padding). One read of each shard gives both.
  double squares = 0, zeros = 0;
  for (GroupState& g : groups_) {
    const Tensor& shard = g.reducer->reduced_grads();
    const ops::SquaresAndZeros whole = ops::sum_squares_and_zeros(shard);
    squares += whole.sum_squares;
    zeros += double(whole.zeros - g.padding_in_shard);
    for (const auto& [b, e] : g.replicated_ranges) {
      const ops::SquaresAndZeros replica = ops::sum_squares_and_zeros(shard.narrow(b, e - b));
      squares -= replica.sum_squares;
      zeros -= double(replica.zeros);
    }
  }
  return {parallel_->world().all_reduce_scalar(squares), int64_t(parallel_->world().all_reduce_scalar(zeros))};
}

void DistributedOptimizer::all_gather_params(GroupState& g, const Tensor& param_shard) {
  if (g.comm->size() == 1) return;   // the shard is the flat buffer, updated in place
  Tensor& flat_params = g.group->flat_params();
  const int64_t ranks = g.comm->size();
  for (const GradReducer::Slice& s : g.reducer->slices()) {
    // The bucket this slice belongs to starts comm-rank slices before it.
    Tensor bucket = flat_params.narrow(s.flat_begin - g.comm->rank() * s.numel, s.numel * ranks);
    g.comm->all_gather(param_shard.narrow(s.shard_begin, s.numel), bucket);
  }
}

OptimizerStepResult DistributedOptimizer::step(double lr) {
  OptimizerStepResult r;
  const ops::SquaresAndZeros stats = grad_norm_squared_and_zeros();
  r.grad_norm = std::sqrt(stats.sum_squares);
  r.num_zeros_in_grad = stats.zeros;
  if (!std::isfinite(r.grad_norm)) return r;   // skipped update: parameters and moments untouched

  ++step_;
  auto hyperparameters = [&](const GroupState& g) {
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
    return hp;
  };
  // Where each group's updated weights go in the parameter dtype: with one
  // rank the flat parameters themselves (the shard is the buffer), else a
  // shard that is all-gathered after. Allocated before the copy stream is
  // ordered after the compute stream, so the host's weights may land in it.
  std::vector<Tensor> param_shards;
  for (GroupState& g : groups_) {
    const Tensor& flat = g.group->flat_params();
    param_shards.push_back(g.comm->size() == 1 ? flat
                                               : Tensor::empty({g.reducer->shard_numel()}, flat.dtype(), flat.device()));
  }
  // The host parts' gradients go down while the device steps its parts.
  if (copies_) {
    copies_->wait_for_compute();
    for (GroupState& g : groups_)
      if (g.host.numel > 0) copies_->copy(g.host.grad, g.reducer->reduced_grads().narrow(0, g.host.numel));
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    GroupState& g = groups_[i];
    const int64_t on_device = g.reducer->shard_numel() - g.host.numel;
    if (on_device == 0) continue;
    Tensor master = device_part(g, State::Master);
    ops::adamw_step(master, g.reducer->reduced_grads().narrow(g.host.numel, on_device), g.exp_avg, g.exp_avg_sq,
                    hyperparameters(g));
    if (!g.master_is_param) param_shards[i].narrow(g.host.numel, on_device).copy_from(master);
  }
  if (copies_) {
    copies_->synchronize();
    for (size_t i = 0; i < groups_.size(); ++i) {
      HostOptimizerState& host = groups_[i].host;
      if (host.numel == 0) continue;
      host_adamw_step(host, hyperparameters(groups_[i]), host_threads_);
      copies_->copy(param_shards[i].narrow(0, host.numel), host.params.defined() ? host.params : host.master);
    }
    copies_->compute_waits();
  }
  for (size_t i = 0; i < groups_.size(); ++i) all_gather_params(groups_[i], param_shards[i]);
  r.update_successful = true;
  return r;
}

}  // namespace bb
