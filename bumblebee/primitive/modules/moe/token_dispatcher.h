// TokenDispatcher: the expert-parallel exchange of an MoE layer's rows
// (Megatron's all-to-all token dispatcher, with expert tensor parallelism).
//
// The E experts are split over the ep group in contiguous blocks of
// L = E / ep: ep rank r holds experts [r L, (r + 1) L), each of them split
// over the etp group (its FFN dimension, see GroupedExperts). After routing,
// a rank's rows are sorted by global expert, so the rows for ep rank r are
// one contiguous run.
//
// dispatch(), in two steps:
//   1. ep all-to-all: each row goes to the rank of its expert in this rank's
//      ep group (the same etp rank), and what arrives is reordered from
//      [source rank][local expert] to [local expert][source rank];
//   2. etp all-gather (etp > 1): every etp rank of the expert's group gets
//      the rows that arrived at each of them, again reordered so each local
//      expert's rows are contiguous. Each etp rank then computes its part of
//      the FFN for all of them (partial sums of the output).
// combine() is the adjoint: a reduce-scatter over etp sums the partial
// outputs and hands each etp rank back the rows that arrived at it, then the
// inverse all-to-all returns them to their source ranks. (Of the two forms
// Megatron has, this is the all-gather after the all-to-all: the simple one,
// with no tp x ep group of its own.) The uneven etp collectives run on
// equal blocks padded to the largest rank's row count.
//
// Both are linear and each is the other's adjoint, so the MoE block's
// backward sends its output gradient with dispatch() and returns its input
// gradient with combine(), the same exchanges in reverse.
#pragma once

#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/distributed/communicator.h"

namespace bb {

class TokenDispatcher {
 public:
  // Every rank of `ep` errors (no hang) when ep does not divide num_experts.
  TokenDispatcher(dist::Communicator& ep, dist::Communicator& etp, int64_t num_experts);

  int64_t local_experts() const { return local_; }
  int64_t first_local_expert() const { return int64_t(ep_->rank()) * local_; }

  // One microbatch's exchange: the counts of both directions.
  struct Plan {
    std::vector<int64_t> send_counts, recv_counts;   // [ep] rows to / from each ep rank
    std::vector<int64_t> recv_rows;                  // [ep * L] rows from ep rank s for local expert l at s * L + l
    std::vector<int64_t> etp_rows;                   // [etp * L] rows that arrived at etp rank s for local expert l
    int64_t arrived = 0;                             // rows after step 1 on this rank
    int64_t etp_block = 0;                           // the largest etp rank's `arrived` (the padded block)
    std::vector<int64_t> local_offsets;              // [L + 1] local expert l's rows after dispatch
  };
  // rows_per_expert [E]: this rank's rows for each global expert.
  Plan plan(const std::vector<int64_t>& rows_per_expert) const;
  // rows [N, ...] sorted by global expert -> [M, ...] sorted by local expert.
  Tensor dispatch(const Plan& plan, const Tensor& rows) const;
  // The adjoint: [M, ...] sorted by local expert (partial over etp) -> [N, ...]
  // in the order dispatch() was given, summed over etp.
  Tensor combine(const Plan& plan, const Tensor& local_rows) const;

 private:
  dist::Communicator *ep_, *etp_;
  int64_t num_experts_, local_;
};

}  // namespace bb
