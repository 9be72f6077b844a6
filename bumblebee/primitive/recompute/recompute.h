// Recompute: a wrapper that trades one extra forward for activation memory,
// and the recompute configuration a model is built with (Megatron's
// recompute_granularity, recompute_modules, recompute_method and
// recompute_num_layers).
//
// Around any Block (a whole decoder layer, a run of layers, or a part of one
// such as its feed-forward slot), forward keeps only the block's input and
// drops everything else; backward runs the block's forward again to rebuild
// its state, then its backward. Gradients are those of the plain block,
// exactly: the second forward sees the same input and parameters.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/layer_range.h"

namespace bb {

// none; selective (the parts of a layer named by the modules, inside the
// layer); full (whole decoder layers wrapped in Recompute).
enum class RecomputeMode { None, Selective, Full };
RecomputeMode recompute_from_name(const std::string& name);   // "none" | "selective" | "full"

// Full recompute over the first N layers of a chunk: block wraps each of
// them alone; uniform wraps the chunk's layers in runs of N (every layer is
// recomputed, only each run's input is kept).
enum class RecomputeMethod { Block, Uniform };

// The parts of one decoder layer that selective recompute drops in forward
// and rebuilds in backward.
struct SelectiveRecompute {
  bool core_attn = false;   // attention's output and log-sum-exp (re-run the attention kernel)
  // the outputs of the layer's norms: input_layernorm, post_attention_layernorm,
  // and inside the attention the q/k norms (with RoPE after them) or MLA's
  // q_a/kv_a norms (re-run each norm from its kept input)
  bool layernorm = false;
  bool mlp = false;         // the SwiGLU output h of the dense MLP and of every expert (re-run swiglu)
  bool moe = false;         // the whole MoE block (wrapped in Recompute)
};

struct RecomputeConfig {
  RecomputeMode mode = RecomputeMode::None;
  SelectiveRecompute modules{true, false, false, false};   // selective: Megatron's default, core_attn
  RecomputeMethod method = RecomputeMethod::Block;
  // block: the first num_layers layers of each chunk (pipeline stage or
  // virtual chunk; 0: all); uniform: the run length (>= 1).
  int64_t num_layers = 0;

  // Whether selective recompute applies to the chunk's layer `layer` (its
  // global index; the chunk's own layers are counted from range.first_layer).
  SelectiveRecompute selective_for(int64_t layer, const LayerRange& range) const;
  // Full recompute: the chunk's `count` layers as runs [first, end) of local
  // indices, each run one Recompute unit; a layer outside every run is not
  // recomputed. Empty when mode is not Full.
  std::vector<std::pair<int64_t, int64_t>> full_runs(int64_t count) const;
};

// Parses the configuration keys: mode none | selective | full; modules a
// comma-separated list of core_attn, layernorm, mlp, moe (selective only); method
// block | uniform; num_layers >= 0. Errors name the key and the value.
RecomputeConfig parse_recompute(const std::string& mode, const std::string& modules, const std::string& method,
                                int64_t num_layers);

class Recompute : public Block {
 public:
  explicit Recompute(std::unique_ptr<Block> inner) : inner_(std::move(inner)) {}
  Block& inner() { return *inner_; }
  Tensor forward(const Tensor& x, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  Tensor backward(const Tensor& dy, const SequenceLayout& seq, std::unique_ptr<BlockState>& state) override;
  // The kept input is all a Recompute holds; it may be dropped and rebuilt too.
  bool drop_input(BlockState& state) override;
  void restore_input(const Tensor& x, BlockState& state) override;

 private:
  std::unique_ptr<Block> inner_;
};

// Wraps `factory`'s blocks in Recompute.
BlockFactory recomputed(BlockFactory factory);

}  // namespace bb
