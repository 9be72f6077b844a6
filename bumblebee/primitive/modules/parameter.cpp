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
  p.offset = numel_;
  numel_ += shape_numel(p.local_shape);
  params_.push_back(std::move(p));
  return params_.back();
}

void ParamStore::allocate(DType param_dtype, DType grad_dtype, Device device, int64_t pad_to) {
  BB_CHECK(!allocated(), "parameter buffer allocated twice");
  const int64_t padded = (numel_ + pad_to - 1) / pad_to * pad_to;
  flat_params_ = Tensor::zeros({padded}, param_dtype, device);
  flat_grads_ = Tensor::zeros({padded}, grad_dtype, device);
  for (Parameter& p : params_) {
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
