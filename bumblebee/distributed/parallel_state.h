// ParallelState: this rank's place in the tp/cp/ep/etp/dp/pp grid and a
// Communicator for every group, laid out as Megatron-Core lays them out.
//
// Rank order (fastest varying first) is tp, cp, dp, pp for dense layers; the
// expert layers regroup the same tp*cp*dp ranks of one pipeline stage as
// etp, ep, edp. A world size or size combination that does not factor is an
// error naming the numbers. See rank_layout.h for the arithmetic and
// docs/distributed.md for worked examples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bumblebee/distributed/communicator.h"
#include "bumblebee/distributed/rank_layout.h"

namespace bb::dist {

class World;

class ParallelState {
 public:
  // One rank, all groups of size 1.
  static std::shared_ptr<ParallelState> single_rank();
  // Splits the world; every rank must call with the same sizes. Sizes that
  // differ between ranks, or that do not factor the world, throw the same
  // bb::Error on every rank (no rank is left waiting).
  static std::shared_ptr<ParallelState> create(World& world, const GroupSizes& sizes);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int tp_rank() const { return tp_->rank(); }
  int tp_size() const { return tp_->size(); }
  int dp_rank() const { return dp_->rank(); }
  int dp_size() const { return dp_->size(); }
  int cp_rank() const { return cp_->rank(); }
  int cp_size() const { return cp_->size(); }
  int pp_rank() const { return pp_->rank(); }
  int pp_size() const { return pp_->size(); }
  int ep_rank() const { return ep_->rank(); }
  int ep_size() const { return ep_->size(); }
  int etp_rank() const { return etp_->rank(); }
  int etp_size() const { return etp_->size(); }
  int edp_rank() const { return edp_->rank(); }
  int edp_size() const { return edp_->size(); }
  const ParallelLayout& layout() const { return layout_; }

  Communicator& world() { return *world_; }
  Communicator& tp() { return *tp_; }
  Communicator& cp() { return *cp_; }
  Communicator& dp() { return *dp_; }
  Communicator& dp_cp() { return *dp_cp_; }
  Communicator& pp() { return *pp_; }
  Communicator& ep() { return *ep_; }
  Communicator& etp() { return *etp_; }
  Communicator& edp() { return *edp_; }
  Communicator& tp_cp() { return *tp_cp_; }   // model-parallel group of one stage (grad-norm reduction)

 private:
  friend class ParallelStateBuilder;
  int world_rank_ = 0, world_size_ = 1;
  ParallelLayout layout_;
  std::shared_ptr<Communicator> world_, tp_, cp_, dp_, dp_cp_, pp_, ep_, etp_, edp_, tp_cp_;
};

// For the model code's size checks: throws bb::Error
// "num_attention_heads 6 is not divisible by tp 4" unless `by` divides `value`.
void check_divisible(const std::string& what, int64_t value, const std::string& by_what, int64_t by);

}  // namespace bb::dist
