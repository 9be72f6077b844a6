// TokenDispatcher: the count exchanges, the ep all-to-all, the etp all-gather and their adjoints.
#include "bumblebee/primitive/modules/moe/token_dispatcher.h"

#include <algorithm>

#include "bumblebee/core/error.h"

namespace bb {

namespace {
Shape with_rows(const Tensor& t, int64_t rows) {
  Shape s = t.shape();
  s[0] = rows;
  return s;
}

// First row of block (s, l), of counts[s * L + l] rows, when the blocks lie
// rank-major: rank s's blocks start at s * stride, or right after rank s - 1's
// when stride < 0.
std::vector<int64_t> rank_major_starts(const std::vector<int64_t>& counts, int64_t ranks, int64_t local,
                                       int64_t stride) {
  std::vector<int64_t> at(counts.size());
  int64_t row = 0;
  for (int64_t s = 0; s < ranks; ++s) {
    if (stride >= 0) row = s * stride;
    for (int64_t l = 0; l < local; ++l) at[size_t(s * local + l)] = row, row += counts[size_t(s * local + l)];
  }
  return at;
}

// The same blocks expert-major: [l][s], packed.
std::vector<int64_t> expert_major_starts(const std::vector<int64_t>& counts, int64_t ranks, int64_t local) {
  std::vector<int64_t> at(counts.size());
  int64_t row = 0;
  for (int64_t l = 0; l < local; ++l)
    for (int64_t s = 0; s < ranks; ++s) at[size_t(s * local + l)] = row, row += counts[size_t(s * local + l)];
  return at;
}

void copy_blocks(const Tensor& from, const std::vector<int64_t>& from_at, Tensor& to,
                 const std::vector<int64_t>& to_at, const std::vector<int64_t>& counts) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    Tensor block = to.narrow(to_at[i], counts[i]);
    block.copy_from(from.narrow(from_at[i], counts[i]));
  }
}

std::vector<int64_t> exchange_counts(dist::Communicator& comm, const std::vector<int64_t>& send) {
  return comm.size() == 1 ? send : comm.all_to_all_counts(send);
}
}  // namespace

TokenDispatcher::TokenDispatcher(dist::Communicator& ep, dist::Communicator& etp, int64_t num_experts)
    : ep_(&ep), etp_(&etp), num_experts_(num_experts), local_(num_experts / ep.size()) {
  BB_CHECK(num_experts > 0 && num_experts % ep.size() == 0, "expert parallelism: backend.parallel.ep = ", ep.size(),
           " does not divide the model's ", num_experts, " experts");
}

TokenDispatcher::Plan TokenDispatcher::plan(const std::vector<int64_t>& rows_per_expert) const {
  BB_CHECK(int64_t(rows_per_expert.size()) == num_experts_, "token dispatcher: ", rows_per_expert.size(),
           " expert counts for ", num_experts_, " experts");
  const int64_t ranks = ep_->size(), etp = etp_->size();
  Plan p;
  p.send_counts.assign(size_t(ranks), 0);
  p.recv_counts.assign(size_t(ranks), 0);
  p.recv_rows.assign(size_t(ranks * local_), 0);
  p.etp_rows.assign(size_t(etp * local_), 0);
  p.local_offsets.assign(size_t(local_ + 1), 0);
  for (int64_t l = 0; l < local_; ++l) {
    std::vector<int64_t> send(size_t(ranks), 0);
    for (int64_t r = 0; r < ranks; ++r) {
      send[size_t(r)] = rows_per_expert[size_t(r * local_ + l)];
      p.send_counts[size_t(r)] += send[size_t(r)];
    }
    const std::vector<int64_t> recv = exchange_counts(*ep_, send);
    int64_t arrived_for_l = 0;
    for (int64_t s = 0; s < ranks; ++s) {
      p.recv_rows[size_t(s * local_ + l)] = recv[size_t(s)];
      p.recv_counts[size_t(s)] += recv[size_t(s)];
      arrived_for_l += recv[size_t(s)];
    }
    p.arrived += arrived_for_l;
    // Step 2's counts: what arrived at each etp rank for local expert l.
    const std::vector<int64_t> at_etp = exchange_counts(*etp_, std::vector<int64_t>(size_t(etp), arrived_for_l));
    for (int64_t s = 0; s < etp; ++s) {
      p.etp_rows[size_t(s * local_ + l)] = at_etp[size_t(s)];
      p.local_offsets[size_t(l + 1)] += at_etp[size_t(s)];
    }
  }
  for (int64_t s = 0; s < etp; ++s) {
    int64_t rows = 0;
    for (int64_t l = 0; l < local_; ++l) rows += p.etp_rows[size_t(s * local_ + l)];
    p.etp_block = std::max(p.etp_block, rows);
  }
  for (int64_t l = 0; l < local_; ++l) p.local_offsets[size_t(l + 1)] += p.local_offsets[size_t(l)];
  return p;
}

Tensor TokenDispatcher::dispatch(const Plan& plan, const Tensor& rows) const {
  const int64_t ranks = ep_->size(), etp = etp_->size();
  Tensor arrived = rows;   // ep = 1: the rows are already sorted by (local) expert
  if (ranks > 1) {
    Tensor rank_major = Tensor::empty(with_rows(rows, plan.arrived), rows.dtype(), rows.device());
    ep_->all_to_all(rows, plan.send_counts, rank_major, plan.recv_counts);
    arrived = Tensor::empty(with_rows(rows, plan.arrived), rows.dtype(), rows.device());
    copy_blocks(rank_major, rank_major_starts(plan.recv_rows, ranks, local_, -1), arrived,
                expert_major_starts(plan.recv_rows, ranks, local_), plan.recv_rows);
  }
  if (etp == 1) return arrived;
  Tensor padded = Tensor::zeros(with_rows(rows, plan.etp_block), rows.dtype(), rows.device());
  if (plan.arrived > 0) padded.narrow(0, plan.arrived).copy_from(arrived);
  Tensor gathered = Tensor::empty(with_rows(rows, etp * plan.etp_block), rows.dtype(), rows.device());
  etp_->all_gather(padded, gathered);
  Tensor out = Tensor::empty(with_rows(rows, plan.local_offsets.back()), rows.dtype(), rows.device());
  copy_blocks(gathered, rank_major_starts(plan.etp_rows, etp, local_, plan.etp_block), out,
              expert_major_starts(plan.etp_rows, etp, local_), plan.etp_rows);
  return out;
}

Tensor TokenDispatcher::combine(const Plan& plan, const Tensor& local_rows) const {
  const int64_t ranks = ep_->size(), etp = etp_->size();
  Tensor mine = local_rows;
  if (etp > 1) {
    Tensor padded = Tensor::zeros(with_rows(local_rows, etp * plan.etp_block), local_rows.dtype(), local_rows.device());
    copy_blocks(local_rows, expert_major_starts(plan.etp_rows, etp, local_), padded,
                rank_major_starts(plan.etp_rows, etp, local_, plan.etp_block), plan.etp_rows);
    Tensor summed = Tensor::empty(with_rows(local_rows, plan.etp_block), local_rows.dtype(), local_rows.device());
    etp_->reduce_scatter(padded, summed);
    mine = summed.narrow(0, plan.arrived);
  }
  if (ranks == 1) return mine;
  int64_t n = 0;
  for (int64_t c : plan.send_counts) n += c;
  Tensor leaving = Tensor::empty(mine.shape(), mine.dtype(), mine.device());
  copy_blocks(mine, expert_major_starts(plan.recv_rows, ranks, local_), leaving,
              rank_major_starts(plan.recv_rows, ranks, local_, -1), plan.recv_rows);
  Tensor out = Tensor::empty(with_rows(mine, n), mine.dtype(), mine.device());
  ep_->all_to_all(leaving, plan.recv_counts, out, plan.send_counts);
  return out;
}

}  // namespace bb
