// Vocab-parallel LM head with fused cross entropy and per-token log-probs.
//
// Logits are never materialised for the whole microbatch: tokens are processed
// in chunks (chunk_tokens each, or with 0 the fewest chunks of at most
// kAutoChunkLogits logits, split evenly); for each chunk the head computes logits = h W^T / temperature on
// its vocabulary shard, reduces the softmax statistics over the tp group (with
// tp = 1 they come from one read of the logits: ops::logits_softmax_stats), and
// produces per-token loss (= -log p(label)). When the gradient of the loss with
// respect to each token's loss is known up front (the built-in loss: the mask
// divided by the token count) the head also computes dlogits, dh and dW in the
// same pass and keeps only dh. Otherwise (a custom loss) it keeps h and
// recomputes each chunk's logits during backward.
//
// Asked for it, the head also returns each token's entropy of the softmax at
// the temperature, from per-rank partial sums reduced over tp like the
// softmax statistics (ops.h: logits_zexp_sum); a loss over the entropy sets
// Saved::dentropy before backward, which then recomputes the logits and
// backpropagates both gradients.
#pragma once

#include <string>

#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

class LMHead {
 public:
  struct Saved {
    Tensor h_full;     // [T, H], kept only for the recompute path
    Tensor labels;     // [T] global ids
    Tensor dh;         // [T/tp, H], set by the fused path
    Tensor entropy;    // [T] (stat dtype) when the forward was asked for it
    Tensor dentropy;   // [T] (stat dtype): the loss's gradient with respect to `entropy`, set before backward
  };
  // Logits of one chunk under chunk_tokens = 0: 2 GiB in bf16. Each chunk's
  // weight-gradient GEMM reads and writes the fp32 [V/tp, H] gradient once,
  // so few large chunks keep that traffic small beside the GEMM's FLOPs.
  static constexpr int64_t kAutoChunkLogits = int64_t(1) << 30;
  // `weight` is the head's own Vocab-sharded parameter or the tied embedding.
  LMHead(Parameter& weight, ParallelContext& pc, double temperature, int64_t chunk_tokens = 0);
  // Tokens per chunk for T tokens over V vocabulary rows.
  int64_t chunk_rows(int64_t T, int64_t V) const;
  // h [T/tp, H], labels [T] -> per-token loss [T] (stat dtype). With dloss
  // defined ([T], stat dtype) gradients are computed in this pass. With
  // `entropy` the per-token entropy goes to s.entropy.
  Tensor forward(const Tensor& h, const Tensor& labels, const Tensor& dloss, Saved& s, bool entropy = false);
  // Returns dh [T/tp, H]. For the fused path `dloss` is ignored (and
  // s.dentropy must be unset: the fused pass has no entropy gradient).
  Tensor backward(const Tensor& dloss, Saved& s);
  // Logits over the whole vocabulary [T, V] on the host (gathered over tp),
  // for validation; never used in training.
  Tensor full_logits(const Tensor& h);

 private:
  // One pass over token chunks: per-token loss, the entropy into *entropy
  // when given, and gradients when dh_full is (of dloss, and of dentropy
  // when defined).
  Tensor run(const Tensor& h_full, const Tensor& labels, const Tensor& dloss, Tensor* dh_full, Tensor* entropy,
             const Tensor& dentropy);
  Parameter* weight_;
  TensorParallel* tp_;
  double inv_temperature_;
  int64_t chunk_tokens_;
};

}  // namespace bb
