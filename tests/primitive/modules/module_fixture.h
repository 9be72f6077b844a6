// Test fixture for the modules above the op level: builds them in float64 on
// the CPU over one parameter store and one tensor-parallel group, gives every
// parameter a seeded value that does not depend on the tp layout, and checks
// gradients against sampled central finite differences (random tensors,
// projections and error measures come from tests/ops/finite_difference.h).
//
// Every module a test uses is made here, so a change in module constructors
// (parameter groups, a parallel context) is a change in this file only; the
// tests speak of inputs, outputs, parameter names and gradients.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bumblebee/core/rng.h"
#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/modules/attention.h"
#include "bumblebee/primitive/modules/decoder_layer.h"
#include "bumblebee/primitive/modules/linear.h"
#include "bumblebee/primitive/modules/lm_head.h"
#include "bumblebee/primitive/modules/lora.h"
#include "bumblebee/primitive/modules/mla_attention.h"
#include "bumblebee/primitive/modules/mlp.h"
#include "bumblebee/primitive/modules/multi_token_prediction.h"
#include "bumblebee/primitive/modules/moe/grouped_experts.h"
#include "bumblebee/primitive/modules/moe/sparse_moe.h"
#include "bumblebee/primitive/modules/parameter_init.h"
#include "bumblebee/primitive/modules/rope.h"
#include "bumblebee/primitive/parallel/parallel_context.h"
#include "bumblebee/primitive/recompute/recompute.h"

#include "../../ops/finite_difference.h"

namespace bb::test {

class ModuleFixture {
 public:
  // One rank: every tensor-parallel mapping is the identity.
  ModuleFixture() : ModuleFixture(dist::ParallelState::single_rank()) {}
  explicit ModuleFixture(std::shared_ptr<dist::ParallelState> parallel) : pc_(std::move(parallel)) {}
  ModuleFixture(const ModuleFixture&) = delete;
  ModuleFixture& operator=(const ModuleFixture&) = delete;

  // LoRA adapters on the target modules of the layers made after this call.
  void set_lora(const LoraConfig& cfg) { store_.set_lora(std::make_shared<LoraConfig>(cfg)); }

  int tp_rank() { return pc_.tp().rank(); }
  int tp_size() { return pc_.tp().size(); }
  TensorParallel& tp() { return pc_.tp(); }

  std::unique_ptr<ColumnParallelLinear> make_column_linear(int64_t in, int64_t out,
                                                           const std::string& name = "column.weight") {
    return std::make_unique<ColumnParallelLinear>(store_, name, in, out, pc_.tp());
  }
  std::unique_ptr<RowParallelLinear> make_row_linear(int64_t in, int64_t out, const std::string& name = "row.weight") {
    return std::make_unique<RowParallelLinear>(store_, name, in, out, pc_.tp());
  }
  // Parameters "<prefix>q_proj.weight", ..., "<prefix>q_norm.weight" (HF names);
  // rotary frequencies of the default rope type.
  std::unique_ptr<SelfAttention> make_attention(const AttentionConfig& cfg, const std::string& prefix = "") {
    return std::make_unique<SelfAttention>(store_, prefix, cfg, pc_, inv_freq(cfg.head_dim));
  }
  // Parameters "<prefix>q_a_proj.weight" (or q_proj), ..., "<prefix>o_proj.weight" (HF's DeepseekV3Attention);
  // rotary frequencies of `rope` over qk_rope_head_dim.
  std::unique_ptr<MLAttention> make_mla_attention(const MLAConfig& cfg, const RopeConfig& rope = {},
                                                  const std::string& prefix = "") {
    const Tensor f = inv_freqs_.emplace_back(rope_inv_freq(rope, cfg.qk_rope_head_dim));
    return std::make_unique<MLAttention>(store_, prefix, cfg, pc_, f);
  }
  // Parameters "<prefix>gate_proj.weight", "<prefix>up_proj.weight", "<prefix>down_proj.weight".
  std::unique_ptr<SwiGLUMLP> make_mlp(int64_t hidden, int64_t ffn, const std::string& prefix = "",
                                      bool recompute_activation = false) {
    return std::make_unique<SwiGLUMLP>(store_, prefix, hidden, ffn, pc_, recompute_activation);
  }
  // Parameters "<prefix>gate.weight" (the router), "<prefix>experts.{e}.{gate,up,down}_proj.weight".
  std::unique_ptr<SparseMoE> make_sparse_moe(const SparseMoEConfig& cfg, const std::string& prefix = "") {
    return std::make_unique<SparseMoE>(store_, prefix, cfg, pc_);
  }
  // Parameters "<prefix>{e}.{gate,up,down}_proj.weight" for the experts e of [first, first + count).
  std::unique_ptr<GroupedExperts> make_grouped_experts(int64_t first, int64_t count, int64_t hidden, int64_t ffn,
                                                       const std::string& prefix = "experts.") {
    return std::make_unique<GroupedExperts>(store_, prefix, first, count, hidden, ffn);
  }
  // Parameters "<prefix>input_layernorm.weight", "<prefix>self_attn.*", "<prefix>mlp.*" (a SwiGLU MLP of
  // `ffn` features in the feed-forward slot, `recompute_activation` its selective `mlp`); wrapped in
  // Recompute when `recompute` is Full.
  std::unique_ptr<Block> make_decoder_layer(const DecoderLayerConfig& cfg, int64_t ffn, RecomputeMode recompute,
                                            const std::string& prefix = "", bool recompute_activation = false) {
    std::unique_ptr<Block> layer =
        std::make_unique<DecoderLayer>(store_, prefix, cfg, pc_, inv_freq(cfg.attention.head_dim),
                                       swiglu_mlp(cfg.attention.hidden, ffn, pc_, recompute_activation));
    if (recompute == RecomputeMode::Full) layer = std::make_unique<Recompute>(std::move(layer));
    return layer;
  }
  // `depths` MTP layers over decoder layers first_layer + k - 1 (`cfg` with a SwiGLU MLP of `ffn` features),
  // parameters "model.layers.{j}.*" (multi_token_prediction.h); float64 residual stream.
  std::unique_ptr<MultiTokenPrediction> make_mtp(int64_t first_layer, int64_t depths, int64_t vocab,
                                                 const DecoderLayerConfig& cfg, int64_t ffn, double loss_scale) {
    const Tensor f = inv_freq(cfg.attention.head_dim);
    ParallelContext& pc = pc_;
    const DecoderLayerFactory layer = [cfg, ffn, f, &pc](ParamStore& store, const std::string& prefix, int64_t) {
      return std::make_unique<DecoderLayer>(store, prefix, cfg, pc, f, swiglu_mlp(cfg.attention.hidden, ffn, pc));
    };
    return std::make_unique<MultiTokenPrediction>(store_, first_layer, depths, vocab, cfg.attention.hidden,
                                                  cfg.norm_eps, loss_scale, pc_, layer, DType::F64);
  }
  // Its own vocab-parallel weight, parameter `name`.
  std::unique_ptr<LMHead> make_lm_head(int64_t vocab, int64_t hidden, double temperature,
                                       const std::string& name = "lm_head.weight", int64_t chunk_tokens = 0) {
    Parameter& w = store_.add(name, {vocab, hidden}, {ShardKind::Vocab, tp_rank(), tp_size()});
    return std::make_unique<LMHead>(w, pc_, temperature, chunk_tokens);
  }

  // Float64 buffers on the CPU, then every parameter drawn from a generator
  // keyed by its name at the full tensor's indices (so a tp shard holds the
  // slice of the single-rank value): N(0, std^2) for matrices, 1 + N(0, 0.1^2)
  // for norm scales (not all ones, so their gradients see every term). Zero grads.
  void allocate_and_init(uint64_t seed, double std = 0.3) {
    store_.allocate(DType::F64, DType::F64, Device::cpu());
    for (Parameter& p : store_.params()) {
      const uint64_t key = seed ^ std::hash<std::string>{}(p.name);
      if (p.init == InitKind::Ones) {
        init_normal_shard(p, key, 0.1);
        double* v = p.value.data<double>();
        for (int64_t i = 0; i < p.value.numel(); ++i) v[i] += 1.0;
      } else {
        init_normal_shard(p, key, std);
      }
    }
  }

  std::deque<Parameter>& params() { return store_.params(); }
  ParamStore& store() { return store_; }
  Parameter& param(const std::string& name) { return store_.get(name); }
  void zero_grads() { store_.zero_grads(); }
  // Replicated parameters (norm scales) see only this rank's tokens or heads;
  // the model sums their gradients over the group once per step, and so does this.
  void reduce_replicated_grads() {
    for (Parameter& p : store_.params())
      if (p.replicated_over_tp()) pc_.tp().reduce_replicated_grad(p.grad);
  }

 private:
  Tensor inv_freq(int64_t head_dim) { return inv_freqs_.emplace_back(rope_inv_freq(RopeConfig{}, head_dim)); }

  ParallelContext pc_;
  ParamStore store_;
  std::deque<Tensor> inv_freqs_;
};

// Packed THD layout of sequences of the given lengths: positions restart at 0
// in each sequence, cu_seqlens are the offsets.
inline SequenceLayout packed_sequences(const std::vector<int64_t>& seq_lens) {
  std::vector<int64_t> positions;
  std::vector<int32_t> cu{0};
  SequenceLayout seq;
  for (int64_t len : seq_lens) {
    for (int64_t i = 0; i < len; ++i) positions.push_back(i);
    cu.push_back(cu.back() + int32_t(len));
    seq.max_seqlen = std::max(seq.max_seqlen, len);
  }
  seq.position_ids = Tensor::from_vector(positions, {int64_t(positions.size())});
  seq.cu_seqlens = Tensor::from_vector(cu, {int64_t(cu.size())});
  return seq;
}

// Fourth-order central difference of `loss` in element i of x (a float64 host
// tensor), left as it was: truncation error O(step^4) against round-off
// ~1e-16 |loss| / step; step 5e-4 leaves below 2e-11 of the gradient's scale
// on every module tested here (1e-3: up to 2.4e-10, from the q/k norms).
inline double central_difference(const std::function<double()>& loss, Tensor& x, int64_t i, double step = 5e-4) {
  double* p = x.data<double>();
  const double saved = p[i];
  auto at = [&](double offset) {
    p[i] = saved + offset;
    return loss();
  };
  const double d1 = at(step) - at(-step), d2 = at(2 * step) - at(-2 * step);
  p[i] = saved;
  return (8.0 * d1 - d2) / (12.0 * step);
}

// max over `samples` distinct random elements of |analytic - numeric|, over
// max |analytic| of the whole tensor (its scale, so elements near zero do not
// blow the ratio up). Every element when the tensor has no more than `samples`.
inline double sampled_gradient_error(const std::function<double()>& loss, Tensor& x,
                                     const std::vector<double>& analytic, Generator& gen, int64_t samples = 24) {
  const int64_t n = x.numel();
  if (int64_t(analytic.size()) != n) return INFINITY;
  std::set<int64_t> picked;
  if (n <= samples) {
    for (int64_t i = 0; i < n; ++i) picked.insert(i);
  } else {
    while (int64_t(picked.size()) < samples) picked.insert(int64_t(gen.next_u64() % uint64_t(n)));
  }
  double diff = 0.0, scale = 0.0;
  for (double a : analytic) scale = std::max(scale, std::abs(a));
  for (int64_t i : picked) diff = std::max(diff, std::abs(analytic[size_t(i)] - central_difference(loss, x, i)));
  return diff / std::max(scale, 1e-300);
}

// Every parameter's gradient (as the backward under test left it, from zero)
// against finite differences of `loss`, which must run a forward only.
inline void expect_parameter_gradients_match(ModuleFixture& fx, const std::function<double()>& loss, Generator& gen,
                                             double tol) {
  std::vector<std::pair<Parameter*, std::vector<double>>> grads;
  for (Parameter& p : fx.params()) grads.emplace_back(&p, p.grad.to_doubles());
  for (auto& [p, grad] : grads) EXPECT_LT(sampled_gradient_error(loss, p->value, grad, gen), tol) << p->name;
}

}  // namespace bb::test
