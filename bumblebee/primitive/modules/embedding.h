// VocabParallelEmbedding: each tp rank holds a contiguous block of vocabulary
// rows (padded so every rank holds the same count); a token's row comes from
// the rank that owns it and the partial rows are summed as the region exits.
#pragma once

#include <string>

#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/parallel_context.h"

namespace bb {

class VocabParallelEmbedding {
 public:
  struct Saved {
    Tensor ids;
  };
  VocabParallelEmbedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t hidden,
                         ParallelContext& pc);
  Parameter& weight() { return *weight_; }
  // ids [T] (all tokens of the microbatch) -> [T/tp, H] (sequence-parallel split).
  Tensor forward(const Tensor& ids, DType act_dtype, Saved& s);
  void backward(const Tensor& dy, const Saved& s);

 private:
  Parameter* weight_;
  TensorParallel* tp_;
};

}  // namespace bb
