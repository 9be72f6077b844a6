// SparseMoE: the mixture-of-experts feed-forward of Qwen3-MoE (HF's
// Qwen3MoeSparseMoeBlock), a Block that fills a decoder layer's feed-forward
// slot:
//   route (TopKRouter, on the device, with the rows sorted by expert) -> permute (each token's rows for its k experts,
//   sorted by expert) -> per expert: down(silu(gate(x)) * up(x)) on its rows
//   -> unpermute (rows summed back per token with the routing weights).
// Parameters in HF's per-expert names: `mlp.gate.weight` [E, H] (dense), then
// per expert `mlp.experts.{e}.gate_proj|up_proj.weight` [I, H] and
// `down_proj.weight` [H, I] (ParamClass::Expert: their own parameter group).
// The experts run as grouped GEMMs over the rows of all local experts
// (GroupedExperts); backward accumulates every expert's weight gradients and
// takes the routing weights' gradients back into the router.
//
// When the layout carries a RouterAuxLoss (SequenceLayout::router_aux), the
// block records its router output, z-loss and expert load there in forward
// and adds the auxiliary loss's gradient to its router's probabilities (and
// the z-loss's to its logits) in backward. With a capacity factor the rows
// beyond each expert's capacity are dropped (expert_capacity.h). With a
// RouterReplay (SequenceLayout::router_replay) the block records its choices
// there or routes to the ones given. With an ExpertBiasUpdate the router has
// an expert bias, and each backward (once per trained microbatch, also under
// recompute) reports the microbatch's tokens per expert to it.
//
// Parallel layouts (Megatron's MoE parallel folding: ep and etp carved from
// the tp x dp ranks of a stage independently of tp; docs/distributed.md):
//   - tp > 1 (always sequence parallel): the block all-gathers the tp
//     group's tokens, every tp rank routes all of them (the router and the
//     auxiliary loss replicated), and tp rank i takes the i-th of tp equal
//     slices of the permuted rows (sorted by expert, so still sorted). Its
//     rows' outputs are unpermuted into a partial sum over tp that a
//     reduce-scatter returns to the sequence-parallel shards. In backward the
//     router's gradients are partial the same way (the aux loss's goes in on
//     tp rank 0 only), summed over tp with the other replicated parameters.
//   - ep > 1: the rank holds only its block of E / ep experts (declared under
//     their global names), and a TokenDispatcher sends each of its rows to
//     the rank of its expert and the results back.
//   - etp > 1: each expert's FFN is split over etp (GroupedExperts), and the
//     dispatcher all-gathers the arrived rows over etp and reduce-scatters the
//     partial outputs.
// Every (token, expert) row is computed by exactly one etp group, so the
// expert gradients are whole on each rank of it and are summed over edp
// only (never over tp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/moe/expert_bias_update.h"
#include "bumblebee/primitive/modules/moe/grouped_experts.h"
#include "bumblebee/primitive/modules/moe/token_dispatcher.h"
#include "bumblebee/primitive/modules/moe/topk_router.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

struct SparseMoEConfig {
  int64_t hidden = 0, moe_ffn = 0, num_experts = 0, top_k = 0;
  bool norm_topk_prob = false;
  // Selective recompute's `mlp` module: each expert's SwiGLU output h is
  // dropped after its down_proj and rebuilt from gate_up in backward.
  bool recompute_activation = false;
  // The router beyond Qwen3-MoE's softmax (see TopKRouter): sigmoid scoring
  // with an expert bias, group-limited selection, a routed scaling factor.
  ops::MoeScore score = ops::MoeScore::Softmax;
  int64_t num_groups = 0, topk_groups = 0;
  double routed_scaling_factor = 1.0;
  int64_t layer = 0;              // the decoder layer, for the load metrics
  int64_t moe_index = 0;          // the model's moe_index-th MoE layer, for router replay
  double capacity_factor = 0.0;   // moe_expert_capacity_factor; 0: no token is dropped
  // Auxiliary-loss-free balancing (moe_router_bias_update_rate > 0); null: off.
  std::shared_ptr<ExpertBiasUpdate> bias_update;
};

class SparseMoE : public Block {
 public:
  struct Saved : BlockState {
    Tensor x;                             // the tp group's tokens (all-gathered when tp > 1)
    Tensor x_perm, y_perm;                // [N] every row; y_perm zero outside this tp rank's share
    int64_t share_begin = 0, share_rows = 0;   // this tp rank's rows of x_perm
    Tensor x_experts;                     // the local experts' rows: the share itself when ep = etp = 1
    Routing routing;
    TokenDispatcher::Plan plan;           // ep > 1 or etp > 1 only
    std::vector<int64_t> offsets;         // [L + 1]: local expert l's rows of x_experts are [offsets[l], offsets[l + 1])
    GroupedExperts::Saved experts;        // the experts' activations
    RouterAuxLoss* aux = nullptr;
    Tensor row_keep;                      // [N] 1 kept, 0 dropped by the capacity; undefined: none dropped
  };
  SparseMoE(ParamStore& store, const std::string& prefix, const SparseMoEConfig& cfg, ParallelContext& pc);
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  // Saved::x, which only the router's weight gradient reads (the experts
  // read their permuted copy).
  bool drop_input(BlockState& state) override;
  void restore_input(const Tensor& x, BlockState& state) override;

 private:
  SparseMoEConfig cfg_;
  TopKRouter router_;
  TensorParallel* tp_;
  std::optional<TokenDispatcher> dispatcher_;   // ep > 1 or etp > 1
  std::optional<GroupedExperts> experts_;       // the local experts, declared after the router
  size_t bias_index_ = 0;                       // this layer's place in cfg_.bias_update
  RowCountCopy row_counts_;                     // the routing's counts to the host
};

// The feed-forward slot filled with a SparseMoE block.
BlockFactory sparse_moe(const SparseMoEConfig& cfg, ParallelContext& pc);

}  // namespace bb
