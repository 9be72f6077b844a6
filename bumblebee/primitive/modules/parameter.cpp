// ParamStore: declaration, grouping, flat allocation and fused views.
#include "bumblebee/primitive/modules/parameter.h"

namespace bb {

Parameter& ParamStore::add(const std::string& name, const Shape& full_shape, ShardInfo shard, InitKind init,
                           ParamClass cls) {
  BB_CHECK(!allocated(), "parameter '", name, "' declared after the parameter buffer was allocated");
  BB_CHECK(find(name) == nullptr, "parameter '", name, "' declared twice");
  Parameter p;
  p.name = name;
  p.full_shape = full_shape;
  p.local_shape = full_shape;
  p.shard = shard.kind;
  p.init = init;
  p.cls = cls;
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
  index_of_.emplace(name, p.index);
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

void ParamStore::allocate(const ParamGroupFn& groups, DType param_dtype, DType grad_dtype, Device device,
                          int64_t bucket_size) {
  assign_groups(groups);
  for (auto& g : groups_) {
    const int64_t pad_to = g->spec_.grad_comm ? g->spec_.grad_comm->size() : 1;
    allocate_group(*g, param_dtype, grad_dtype, device, pad_to, bucket_size);
  }
}

void ParamStore::allocate(DType param_dtype, DType grad_dtype, Device device, int64_t pad_to, int64_t bucket_size) {
  assign_groups(ParamGroupFn());
  allocate_group(*groups_.front(), param_dtype, grad_dtype, device, pad_to, bucket_size);
}

void ParamStore::assign_groups(const ParamGroupFn& groups) {
  BB_CHECK(!allocated(), "parameter buffer allocated twice");
  BB_CHECK(!params_.empty(), "no parameters to allocate");
  for (Parameter& p : params_) {
    const ParamGroupSpec spec = groups ? groups(p) : ParamGroupSpec{};
    ParamGroup* g = nullptr;
    for (auto& existing : groups_)
      if (existing->spec_.name == spec.name) g = existing.get();
    if (!g) {
      groups_.push_back(std::make_unique<ParamGroup>());
      g = groups_.back().get();
      g->spec_ = spec;
    }
    const ParamGroupSpec& have = g->spec_;
    BB_CHECK(have.trainable == spec.trainable && have.weight_decay_mult == spec.weight_decay_mult &&
                 have.lr_mult == spec.lr_mult && have.grad_comm == spec.grad_comm,
             "parameter '", p.name, "' joins group '", spec.name, "' with settings other than the group's");
    p.group = g;
    p.group_index = g->params_.size();
    g->params_.push_back(&p);
  }
  for (size_t i = 0; i + 1 < params_.size(); ++i)
    BB_CHECK(!joined_to_next_[i] || params_[i].group == params_[i + 1].group, "parameters '", params_[i].name,
             "' and '", params_[i + 1].name, "' are one fused operand but were put in groups '",
             params_[i].group->name(), "' and '", params_[i + 1].group->name(), "'");
}

void ParamStore::allocate_group(ParamGroup& g, DType param_dtype, DType grad_dtype, Device device, int64_t pad_to,
                                int64_t bucket_size) {
  std::vector<int64_t> numels;
  std::vector<bool> joined;
  for (const Parameter* p : g.params_) {
    numels.push_back(shape_numel(p->local_shape));
    joined.push_back(joined_to_next_[p->index]);
  }
  GradBucketLayout layout = plan_grad_buckets(numels, joined, pad_to, bucket_size);
  g.buckets_ = std::move(layout.buckets);
  g.numel_ = 0;
  g.flat_params_ = Tensor::zeros({layout.total}, param_dtype, device);
  g.flat_grads_ = g.trainable() ? Tensor::zeros({layout.total}, grad_dtype, device) : Tensor();
  for (size_t i = 0; i < g.params_.size(); ++i) {
    Parameter& p = *g.params_[i];
    p.offset = layout.offsets[i];
    p.value = g.flat_params_.flat_slice(p.offset, p.local_shape);
    p.grad = g.trainable() ? g.flat_grads_.flat_slice(p.offset, p.local_shape) : Tensor();
    g.numel_ += shape_numel(p.local_shape);
  }
}

Tensor ParamGroup::swap_flat_params(Tensor flat) {
  BB_CHECK(flat.numel() == flat_params_.numel(), "group '", name(), "': a flat buffer of ", flat.numel(),
           " elements cannot stand for its ", flat_params_.numel(), " parameter elements");
  std::swap(flat, flat_params_);
  for (Parameter* p : params_) p->value = flat_params_.flat_slice(p->offset, p->local_shape);
  return flat;
}

ParamGroup& ParamStore::group(const std::string& name) {
  for (auto& g : groups_)
    if (g->name() == name) return *g;
  BB_FAIL("no parameter group named '", name, "'");
}

DType ParamStore::param_dtype() const {
  BB_CHECK(allocated(), "parameter dtype asked before the parameters were allocated");
  return groups_.front()->flat_params_.dtype();
}

Parameter& ParamStore::get(const std::string& name) {
  Parameter* p = find(name);
  BB_CHECK(p, "no parameter named '", name, "'");
  return *p;
}

Parameter* ParamStore::find(const std::string& name) {
  auto it = index_of_.find(name);
  return it == index_of_.end() ? nullptr : &params_[it->second];
}

const Parameter* ParamStore::find(const std::string& name) const {
  auto it = index_of_.find(name);
  return it == index_of_.end() ? nullptr : &params_[it->second];
}

Tensor ParamStore::fused(const Tensor& flat, const Parameter& first, const Parameter& last) const {
  BB_CHECK(first.local_shape.size() == 2 && last.local_shape.size() == 2, "fused view needs 2-D parameters");
  BB_CHECK(first.group && first.group == last.group, "parameters '", first.name, "' .. '", last.name,
           "' are not in one allocated group");
  const int64_t cols = first.local_shape[1];
  int64_t rows = 0, expect = first.offset;
  for (size_t i = first.group_index; i < first.group->params().size(); ++i) {
    const Parameter& p = *first.group->params()[i];
    BB_CHECK(p.offset == expect && p.local_shape.size() == 2 && p.local_shape[1] == cols, "parameters '",
             first.name, "' .. '", last.name, "' are not adjacent with equal columns");
    rows += p.local_shape[0];
    expect += shape_numel(p.local_shape);
    if (&p == &last) break;
  }
  return flat.flat_slice(first.offset, {rows, cols});
}

Tensor ParamStore::fused_value(const Parameter& first, const Parameter& last) const {
  return fused(first.group->flat_params(), first, last);
}

Tensor ParamStore::fused_grad(const Parameter& first, const Parameter& last) const {
  if (!first.requires_grad()) return Tensor();
  return fused(first.group->flat_grads(), first, last);
}

double ParamStore::fused_grad_beta(const Parameter& first, const Parameter& last) {
  std::vector<Parameter*> run;
  for (size_t i = first.index; i <= last.index; ++i) run.push_back(&params_[i]);
  return grad_write_beta(run);
}

void ParamStore::zero_grads() {
  for (auto& g : groups_) {
    if (!g->flat_grads_.defined()) continue;
    if (!defer_zero_) {
      g->flat_grads_.zero_();
      continue;
    }
    for (Parameter* p : g->params_) p->grad_pending_zero = true;
  }
}

void ParamStore::settle_grads() {
  for (auto& g : groups_) {
    if (!g->flat_grads_.defined()) continue;
    // A run spans the bucket padding between its parameters, which is zero already.
    int64_t begin = -1, end = 0;
    auto flush = [&] {
      if (begin >= 0) g->flat_grads_.narrow(begin, end - begin).zero_();
      begin = -1;
    };
    for (Parameter* p : g->params_) {
      if (!p->grad_pending_zero) {
        flush();
        continue;
      }
      p->grad_pending_zero = false;
      if (begin < 0) begin = p->offset;
      end = p->offset + p->grad.numel();
    }
    flush();
  }
}

double grad_write_beta(Parameter& p) {
  if (!p.grad_pending_zero) return 1.0;
  p.grad_pending_zero = false;
  return 0.0;
}

double grad_write_beta(const std::vector<Parameter*>& ps) {
  size_t pending = 0;
  for (const Parameter* p : ps) pending += p->grad_pending_zero ? 1 : 0;
  if (pending == 0) return 1.0;
  if (pending == ps.size()) {
    for (Parameter* p : ps) p->grad_pending_zero = false;
    return 0.0;
  }
  for (Parameter* p : ps) grad_to_accumulate(*p);
  return 1.0;
}

Tensor& grad_to_accumulate(Parameter& p) {
  if (p.grad_pending_zero) {
    p.grad.zero_();
    p.grad_pending_zero = false;
  }
  return p.grad;
}

}  // namespace bb
