// Optimizer-state offload: choosing each group's host prefix, and its buffers.
#include "bumblebee/primitive/optim/optimizer_offload.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "bumblebee/ops/op_profile.h"

namespace bb {

size_t HostOptimizerState::state_bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&master, &exp_avg, &exp_avg_sq})
    if (t->defined()) n += t->nbytes();
  return n;
}

size_t HostOptimizerState::staging_bytes() const {
  return (grad.defined() ? grad.nbytes() : 0) + (params.defined() ? params.nbytes() : 0);
}

std::vector<int64_t> host_prefix_lengths(const std::vector<std::vector<int64_t>>& piece_ends,
                                         const std::vector<int64_t>& bytes_per_element, double fraction) {
  BB_CHECK(fraction >= 0.0 && fraction <= 1.0, "optimizer.offload_fraction must lie in [0, 1], got ", fraction);
  BB_CHECK(piece_ends.size() == bytes_per_element.size(), "host_prefix_lengths: ", piece_ends.size(),
           " groups of pieces, ", bytes_per_element.size(), " element sizes");
  double total = 0;
  for (size_t i = 0; i < piece_ends.size(); ++i)
    if (!piece_ends[i].empty()) total += double(piece_ends[i].back()) * double(bytes_per_element[i]);
  const double threshold = fraction * total;
  double offloaded = 0;
  std::vector<int64_t> out(piece_ends.size(), 0);
  for (size_t i = 0; i < piece_ends.size(); ++i)
    for (int64_t end : piece_ends[i]) {
      if (offloaded >= threshold) return out;
      offloaded += double(end - out[i]) * double(bytes_per_element[i]);
      out[i] = end;
    }
  return out;
}

void host_adamw_step(HostOptimizerState& s, const ops::AdamWParams& hp, int threads) {
  // Below this many elements a range per thread costs more than it saves.
  constexpr int64_t kMinPerThread = int64_t(1) << 18;
  const int64_t n = s.numel;
  const int64_t ranges = std::clamp<int64_t>(n / kMinPerThread, 1, std::max(threads, 1));
  auto step_range = [&](int64_t begin, int64_t len) {
    Tensor master = s.master.narrow(begin, len), m = s.exp_avg.narrow(begin, len), v = s.exp_avg_sq.narrow(begin, len);
    ops::adamw_step(master, s.grad.narrow(begin, len), m, v, hp);
    if (s.params.defined()) s.params.narrow(begin, len).copy_from(master);
  };
  if (ranges == 1) {
    step_range(0, n);
    return;
  }
  // The op profile is not thread-safe: the step is one record, timed here,
  // and the workers' ops record nothing.
  ops::profile::Scope scope(Device::cpu(), "adamw_step host");
  const bool profiling = ops::profile::enabled();
  ops::profile::set_enabled(false);
  const int64_t per = (n + ranges - 1) / ranges;
  std::vector<std::thread> workers;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranges));
  for (int64_t r = 0; r < ranges; ++r)
    workers.emplace_back([&, r] {
      try {
        const int64_t begin = r * per;
        step_range(begin, std::min(per, n - begin));
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (std::thread& w : workers) w.join();
  ops::profile::set_enabled(profiling);
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

namespace {
Tensor host_buffer(int64_t numel, DType dtype, bool pinned) {
  Tensor t = Tensor::zeros({numel}, dtype, Device::cpu());
  if (pinned) t.storage()->relocate(Device::cpu(), true);
  return t;
}
}  // namespace

HostOptimizerState make_host_optimizer_state(int64_t numel, DType master_dtype, DType grad_dtype, DType param_dtype,
                                             Device home) {
  HostOptimizerState s;
  s.numel = numel;
  if (numel == 0) return s;
  BB_CHECK(grad_dtype == master_dtype, "optimizer.offload_fraction > 0: the host steps ", dtype_name(master_dtype),
           " master weights with ", dtype_name(master_dtype), " gradients, but the gradients are ",
           dtype_name(grad_dtype), " (optimizer.main_grads_dtype: use fp32 with offload)");
  const bool pinned = home.is_cuda();
  s.master = host_buffer(numel, master_dtype, pinned);
  s.exp_avg = host_buffer(numel, master_dtype, pinned);
  s.exp_avg_sq = host_buffer(numel, master_dtype, pinned);
  s.grad = host_buffer(numel, grad_dtype, pinned);
  if (param_dtype != master_dtype) s.params = host_buffer(numel, param_dtype, pinned);
  return s;
}

}  // namespace bb
