// TokenDispatcher: the expert-parallel exchange of an MoE layer's rows
// (Megatron's all-to-all token dispatcher, etp = 1).
//
// The E experts are split over the ep group in contiguous blocks of
// L = E / ep: rank r holds experts [r L, (r + 1) L). After routing, a rank's
// rows are sorted by global expert, so the rows for rank r are one contiguous
// run. plan() exchanges the per-expert counts (all_to_all_counts, once per
// local expert index); dispatch() sends the rows with one all_to_all and
// reorders what arrives from [source rank][local expert] to
// [local expert][source rank], so each local expert's rows are contiguous;
// combine() is its exact inverse (reorder back, the inverse all_to_all).
//
// Both are permutations of rows, so each is the other's adjoint: the MoE
// block's backward sends its output gradient with dispatch() and returns its
// input gradient with combine(), the same exchanges in reverse.
#pragma once

#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/distributed/communicator.h"

namespace bb {

class TokenDispatcher {
 public:
  // Every rank of `ep` errors (no hang) when ep does not divide num_experts.
  TokenDispatcher(dist::Communicator& ep, int64_t num_experts);

  int64_t local_experts() const { return local_; }
  int64_t first_local_expert() const { return int64_t(ep_->rank()) * local_; }

  // One microbatch's exchange: the counts of both directions.
  struct Plan {
    std::vector<int64_t> send_counts, recv_counts;   // [ep] rows to / from each rank
    std::vector<int64_t> recv_rows;                  // [ep * L] rows from rank s for local expert l at s * L + l
    std::vector<int64_t> local_offsets;              // [L + 1] local expert l's rows after dispatch
  };
  // rows_per_expert [E]: this rank's rows for each global expert.
  Plan plan(const std::vector<int64_t>& rows_per_expert) const;
  // rows [N, ...] sorted by global expert -> [M, ...] sorted by local expert.
  Tensor dispatch(const Plan& plan, const Tensor& rows) const;
  // The inverse: [M, ...] sorted by local expert -> [N, ...] in the order dispatch() was given.
  Tensor combine(const Plan& plan, const Tensor& local_rows) const;

 private:
  dist::Communicator* ep_;
  int64_t num_experts_, local_;
};

}  // namespace bb
