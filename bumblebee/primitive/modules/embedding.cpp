// VocabParallelEmbedding forward and backward.
#include "bumblebee/primitive/modules/embedding.h"

#include "bumblebee/ops/ops.h"

namespace bb {

VocabParallelEmbedding::VocabParallelEmbedding(ParamStore& store, const std::string& name, int64_t vocab,
                                               int64_t hidden, ParallelContext& pc)
    : weight_(&store.add(name, {vocab, hidden}, {ShardKind::Vocab, pc.tp().rank(), pc.tp().size()})),
      tp_(&pc.tp()) {}

Tensor VocabParallelEmbedding::forward(const Tensor& ids, DType act_dtype, Saved& s) {
  s.ids = ids;
  Tensor rows = Tensor::empty({ids.size(0), weight_->local_shape[1]}, act_dtype, ids.device());
  ops::embedding_forward(weight_->value, ids, weight_->shard_begin, rows);
  return tp_->exit(rows);
}

void VocabParallelEmbedding::backward(const Tensor& dy, const Saved& s) {
  Tensor dy_full = tp_->exit_backward(dy);
  if (weight_->requires_grad()) ops::embedding_backward(dy_full, s.ids, weight_->shard_begin, grad_to_accumulate(*weight_));
}

}  // namespace bb
