// ParamStore: declaration, flat allocation and fused views.
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

Parameter& ParamStore::add(const std::string& name, const Shape& full_shape, ShardInfo shard, InitKind init) {
  BB_CHECK(!allocated(), "parameter '", name, "' declared after the parameter buffer was allocated");
  BB_CHECK(find(name) == nullptr, "parameter '", name, "' declared twice");
  Parameter p;
  p.name = name;
  p.full_shape = full_shape;
  p.local_shape = full_shape;
  p.shard = shard.kind;
  p.init = init;
  const int64_t tp = shard.tp_size;
  switch (shard.kind) {
    case ShardKind::Replicated:
      p.shard_valid = full_shape.empty() ? 1 : full_shape[0];
      break;
    case ShardKind::Column:
      BB_CHECK(full_shape[0] % tp == 0, "parameter '", name, "': dimension 0 of size ", full_shape[0],
               " is not divisible by tp ", tp);
      p.local_shape[0] = full_shape[0] / tp;
      p.shard_begin = shard.tp_rank * p.local_shape[0];
      p.shard_valid = p.local_shape[0];
      break;
    case ShardKind::Row:
      BB_CHECK(full_shape.size() == 2 && full_shape[1] % tp == 0, "parameter '", name, "': dimension 1 of ",
               shape_str(full_shape), " is not divisible by tp ", tp);
      p.local_shape[1] = full_shape[1] / tp;
      p.shard_begin = shard.tp_rank * p.local_shape[1];
      p.shard_valid = p.local_shape[1];
      break;
    case ShardKind::Vocab: {
      const int64_t padded = (full_shape[0] + tp - 1) / tp * tp;
      p.local_shape[0] = padded / tp;
      p.shard_begin = shard.tp_rank * p.local_shape[0];
      p.shard_valid = std::max<int64_t>(0, std::min(p.local_shape[0], full_shape[0] - p.shard_begin));
      break;
    }
  }
  numel_ += shape_numel(p.local_shape);
  p.index = params_.size();
  params_.push_back(std::move(p));
  joined_to_next_.push_back(false);
  return params_.back();
}

void ParamStore::keep_together(const Parameter& first, const Parameter& last) {
  BB_CHECK(!allocated(), "keep_together('", first.name, "', '", last.name, "') after the buffer was allocated");
  const size_t a = first.index, b = last.index;
  BB_CHECK(b < params_.size() && &params_[a] == &first && &params_[b] == &last, "keep_together: '", first.name,
           "' .. '", last.name, "' are not parameters of this store");
  BB_CHECK(a <= b, "keep_together: '", first.name, "' is registered after '", last.name, "'");
  for (size_t i = a; i < b; ++i) joined_to_next_[i] = true;
}

void ParamStore::allocate(DType param_dtype, DType grad_dtype, Device device, int64_t pad_to, int64_t bucket_size) {
  BB_CHECK(!allocated(), "parameter buffer allocated twice");
  std::vector<int64_t> numels;
  for (const Parameter& p : params_) numels.push_back(shape_numel(p.local_shape));
  GradBucketLayout layout = plan_grad_buckets(numels, joined_to_next_, pad_to, bucket_size);
  buckets_ = std::move(layout.buckets);
  flat_params_ = Tensor::zeros({layout.total}, param_dtype, device);
  flat_grads_ = Tensor::zeros({layout.total}, grad_dtype, device);
  for (size_t i = 0; i < params_.size(); ++i) {
    Parameter& p = params_[i];
    p.offset = layout.offsets[i];
    p.value = flat_params_.flat_slice(p.offset, p.local_shape);
    p.grad = flat_grads_.flat_slice(p.offset, p.local_shape);
  }
}

Parameter& ParamStore::get(const std::string& name) {
  for (Parameter& p : params_)
    if (p.name == name) return p;
  BB_FAIL("no parameter named '", name, "'");
}

const Parameter* ParamStore::find(const std::string& name) const {
  for (const Parameter& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Tensor ParamStore::fused(const Tensor& flat, const Parameter& first, const Parameter& last) const {
  BB_CHECK(first.local_shape.size() == 2 && last.local_shape.size() == 2, "fused view needs 2-D parameters");
  const int64_t cols = first.local_shape[1];
  int64_t rows = 0, expect = first.offset;
  bool inside = false;
  for (const Parameter& p : params_) {
    if (&p == &first) inside = true;
    if (!inside) continue;
    BB_CHECK(p.offset == expect && p.local_shape.size() == 2 && p.local_shape[1] == cols, "parameters '",
             first.name, "' .. '", last.name, "' are not adjacent with equal columns");
    rows += p.local_shape[0];
    expect += shape_numel(p.local_shape);
    if (&p == &last) break;
  }
  return flat.flat_slice(first.offset, {rows, cols});
}

Tensor ParamStore::fused_value(const Parameter& first, const Parameter& last) const {
  return fused(flat_params_, first, last);
}

Tensor ParamStore::fused_grad(const Parameter& first, const Parameter& last) const {
  return fused(flat_grads_, first, last);
}

void ParamStore::zero_grads() {
  if (flat_grads_.defined()) flat_grads_.zero_();
}

}  // namespace bb
