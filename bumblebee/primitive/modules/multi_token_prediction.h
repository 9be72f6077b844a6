// Multi-token prediction (DeepSeek-V3, paper section 2.2; vLLM's
// deepseek_mtp, Megatron's multi_token_prediction): D sequential modules
// after the last decoder layer that each predict one token further ahead.
// With h^0 the main model's final hidden states (before the final norm),
// depth k = 1..D computes
//   h'_i     = eh_proj([enorm(Emb_k(t_{i+k})) | hnorm(h^{k-1}_i)])   (Linear 2H -> H, embedding first)
//   h^k      = DecoderLayer_k(h')                                      (decoder layer num_layers + k - 1)
//   loss^k_i = CE(shared_head.head(shared_head.norm(h^k_i)), t_{i+k+1})
// within each packed sequence: position i scores t_{i+k+1} under the main
// loss mask of that token, and positions whose target lies past their
// sequence's end are not scored (their embedding id is 0; causal attention
// keeps them from reaching a scored position). Every depth has its own
// embedding and head weights, as DeepSeek's checkpoints store them, so
// nothing is shared with the main model's.
//
// The objective a microbatch adds is (scale / D) x weight x sum_k loss^k,
// loss^k the mean over the microbatch's scored positions of depth k (as
// Megatron's per-microbatch MTP loss) and `weight` the microbatch's share of
// the step's loss tokens (as the MoE auxiliary loss). Needs every token of
// each sequence in order on the rank (no context parallelism); under tensor
// parallelism ids, labels and the loss are whole and hidden states sequence
// parallel [T/tp, H], as in the rest of the model.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/primitive/modules/block.h"
#include "bumblebee/primitive/modules/column_select.h"
#include "bumblebee/primitive/modules/embedding.h"
#include "bumblebee/primitive/modules/lm_head.h"
#include "bumblebee/primitive/modules/rmsnorm.h"

namespace bb {

// Builds decoder layer `layer`, its parameters named `prefix` + HF suffix.
using DecoderLayerFactory =
    std::function<std::unique_ptr<Block>(ParamStore& store, const std::string& prefix, int64_t layer)>;

// The depth-k inputs and targets of one microbatch, from the main model's
// (input_ids [T], next-token labels [T], loss mask [T], cu_seqlens [S+1], host).
struct MtpTargets {
  std::vector<int64_t> ids;      // [T] t_{i+k}, 0 past the sequence's end
  std::vector<int64_t> labels;   // [T] t_{i+k+1}
  std::vector<double> mask;      // [T] the main loss mask of t_{i+k+1}; 0 past the end
};
MtpTargets mtp_targets(const std::vector<int64_t>& input_ids, const std::vector<int64_t>& labels,
                       const std::vector<double>& loss_mask, const std::vector<int64_t>& cu_seqlens, int64_t depth);

// One depth: model.layers.{layer}.{embed_tokens, enorm, hnorm, eh_proj,
// <decoder layer>, shared_head.norm, shared_head.head}.
class MtpLayer {
 public:
  struct Saved {
    VocabParallelEmbedding::Saved embed;
    RMSNorm::Saved enorm, hnorm, head_norm;
    Tensor cat;                          // [T/tp, 2H], eh_proj's input
    std::unique_ptr<BlockState> layer;
    LMHead::Saved head;
  };
  MtpLayer(ParamStore& store, int64_t layer, int64_t vocab, int64_t hidden, double eps, ParallelContext& pc,
           const DecoderLayerFactory& decoder_layer, DType residual_dtype);
  // h_prev [T/tp, H] -> h^k [T/tp, H]; the per-token loss [T] goes to *token_loss.
  // With dloss defined the head's gradients are computed in this pass.
  Tensor forward(const Tensor& h_prev, const Tensor& ids, const Tensor& labels, const Tensor& dloss,
                 const SequenceLayout& seq, Tensor& token_loss, Saved& s);
  // dh_next: the gradient of h^k from the next depth (undefined for the last);
  // dloss: the head's loss gradient (ignored when the forward fused it). Returns dh_prev.
  Tensor backward(const Tensor& dh_next, const Tensor& dloss, const SequenceLayout& seq, Saved& s);

 private:
  int64_t hidden_;
  DType residual_dtype_;
  VocabParallelEmbedding embed_;
  RMSNorm enorm_, hnorm_;
  Parameter* eh_proj_;
  ColumnSelect embed_columns_, hidden_columns_;   // [e | h] = columns [0, H) and [H, 2H) of eh_proj's input
  std::unique_ptr<Block> layer_;
  RMSNorm head_norm_;
  Parameter* head_weight_;
  LMHead head_;
};

class MultiTokenPrediction {
 public:
  struct Saved {
    std::vector<MtpLayer::Saved> depths;
    std::vector<Tensor> dloss;    // [T] per depth: each position's weight in the objective
    std::vector<double> losses;   // loss^k per depth (mean over its scored positions)
    double objective = 0.0;       // what the microbatch adds to the loss
    bool fused = false;
  };
  // Depth k is decoder layer first_layer + k - 1 (first_layer: the main model's layer count).
  MultiTokenPrediction(ParamStore& store, int64_t first_layer, int64_t depths, int64_t vocab, int64_t hidden,
                       double eps, double loss_scale, ParallelContext& pc, const DecoderLayerFactory& decoder_layer,
                       DType residual_dtype);
  int64_t depths() const { return int64_t(layers_.size()); }
  // h0 [T/tp, H]; input_ids, labels, loss_mask [T] as the main head gets them.
  // fused: the gradients in this pass (a training forward with the built-in loss).
  void forward(const Tensor& h0, const Tensor& input_ids, const Tensor& labels, const Tensor& loss_mask,
               const SequenceLayout& seq, double weight, bool fused, Saved& s);
  // The gradient of h0; releases the activations.
  Tensor backward(const SequenceLayout& seq, Saved& s);

 private:
  double loss_scale_;
  std::vector<std::unique_ptr<MtpLayer>> layers_;
};

}  // namespace bb
