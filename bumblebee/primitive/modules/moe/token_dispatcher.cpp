// TokenDispatcher: the count exchange, the row exchange and its inverse.
#include "bumblebee/primitive/modules/moe/token_dispatcher.h"

#include "bumblebee/core/error.h"

namespace bb {

namespace {
Shape with_rows(const Tensor& t, int64_t rows) {
  Shape s = t.shape();
  s[0] = rows;
  return s;
}

// Copies the blocks of `from` (in rank-major order [s][l]) into `to` in
// expert-major order [l][s], or back when `to_expert_major` is false.
void reorder(const Tensor& from, Tensor& to, const std::vector<int64_t>& recv_rows, int64_t ranks, int64_t local,
             bool to_expert_major) {
  std::vector<int64_t> rank_major(size_t(ranks * local)), expert_major(size_t(ranks * local));
  int64_t at = 0;
  for (int64_t s = 0; s < ranks; ++s)
    for (int64_t l = 0; l < local; ++l) rank_major[size_t(s * local + l)] = at, at += recv_rows[size_t(s * local + l)];
  at = 0;
  for (int64_t l = 0; l < local; ++l)
    for (int64_t s = 0; s < ranks; ++s) expert_major[size_t(s * local + l)] = at, at += recv_rows[size_t(s * local + l)];
  for (size_t i = 0; i < recv_rows.size(); ++i) {
    if (recv_rows[i] == 0) continue;
    const int64_t src = to_expert_major ? rank_major[i] : expert_major[i];
    const int64_t dst = to_expert_major ? expert_major[i] : rank_major[i];
    Tensor block = to.narrow(dst, recv_rows[i]);
    block.copy_from(from.narrow(src, recv_rows[i]));
  }
}
}  // namespace

TokenDispatcher::TokenDispatcher(dist::Communicator& ep, int64_t num_experts)
    : ep_(&ep), num_experts_(num_experts), local_(num_experts / ep.size()) {
  BB_CHECK(num_experts > 0 && num_experts % ep.size() == 0, "expert parallelism: backend.parallel.ep = ", ep.size(),
           " does not divide the model's ", num_experts, " experts");
}

TokenDispatcher::Plan TokenDispatcher::plan(const std::vector<int64_t>& rows_per_expert) const {
  BB_CHECK(int64_t(rows_per_expert.size()) == num_experts_, "token dispatcher: ", rows_per_expert.size(),
           " expert counts for ", num_experts_, " experts");
  const int64_t ranks = ep_->size();
  Plan p;
  p.send_counts.assign(size_t(ranks), 0);
  p.recv_counts.assign(size_t(ranks), 0);
  p.recv_rows.assign(size_t(ranks * local_), 0);
  p.local_offsets.assign(size_t(local_ + 1), 0);
  for (int64_t l = 0; l < local_; ++l) {
    std::vector<int64_t> send(static_cast<size_t>(ranks), 0);
    for (int64_t r = 0; r < ranks; ++r) {
      send[size_t(r)] = rows_per_expert[size_t(r * local_ + l)];
      p.send_counts[size_t(r)] += send[size_t(r)];
    }
    const std::vector<int64_t> recv = ep_->all_to_all_counts(send);
    for (int64_t s = 0; s < ranks; ++s) {
      p.recv_rows[size_t(s * local_ + l)] = recv[size_t(s)];
      p.recv_counts[size_t(s)] += recv[size_t(s)];
      p.local_offsets[size_t(l + 1)] += recv[size_t(s)];
    }
  }
  for (int64_t l = 0; l < local_; ++l) p.local_offsets[size_t(l + 1)] += p.local_offsets[size_t(l)];
  return p;
}

Tensor TokenDispatcher::dispatch(const Plan& plan, const Tensor& rows) const {
  const int64_t m = plan.local_offsets.back();
  Tensor arrived = Tensor::empty(with_rows(rows, m), rows.dtype(), rows.device());
  ep_->all_to_all(rows, plan.send_counts, arrived, plan.recv_counts);
  Tensor out = Tensor::empty(with_rows(rows, m), rows.dtype(), rows.device());
  reorder(arrived, out, plan.recv_rows, ep_->size(), local_, true);
  return out;
}

Tensor TokenDispatcher::combine(const Plan& plan, const Tensor& local_rows) const {
  int64_t n = 0;
  for (int64_t c : plan.send_counts) n += c;
  Tensor leaving = Tensor::empty(local_rows.shape(), local_rows.dtype(), local_rows.device());
  reorder(local_rows, leaving, plan.recv_rows, ep_->size(), local_, false);
  Tensor out = Tensor::empty(with_rows(local_rows, n), local_rows.dtype(), local_rows.device());
  ep_->all_to_all(leaving, plan.recv_counts, out, plan.send_counts);
  return out;
}

}  // namespace bb
