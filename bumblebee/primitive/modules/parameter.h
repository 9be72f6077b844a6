// Parameters and the flat buffers that hold them.
//
// Every parameter of a model is a view into one contiguous parameter buffer,
// and its gradient a view into one contiguous gradient buffer, in registration
// order. That makes the optimizer one multi-tensor pass, the gradient norm one
// reduction, data-parallel reduce-scatter a matter of cutting the buffer, and
// lets adjacent parameters (q|k|v, gate|up) act as one fused GEMM operand.
//
// A parameter carries its Hugging Face name and how it is split over the
// tensor-parallel group, which is all checkpoint loading and export need.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/primitive/modules/grad_bucket_layout.h"

namespace bb {

enum class ShardKind {
  Replicated,   // the same full tensor on every tp rank
  Column,       // dim 0 split evenly over tp ranks
  Row,          // dim 1 split evenly over tp ranks
  Vocab,        // dim 0 split over tp ranks after padding to a multiple of tp
};

enum class InitKind { Normal, Ones };

struct Parameter {
  std::string name;      // Hugging Face name
  Shape full_shape;      // shape in the Hugging Face checkpoint
  Shape local_shape;     // this rank's part (Vocab: padded rows included)
  ShardKind shard = ShardKind::Replicated;
  int64_t shard_begin = 0;   // first row (Column/Vocab) or column (Row) of the full tensor held here
  int64_t shard_valid = 0;   // rows/columns of the full tensor held here (Vocab: excludes padding)
  InitKind init = InitKind::Normal;
  bool replicated_over_tp() const { return shard == ShardKind::Replicated; }

  Tensor value;  // view into ParamStore::flat_params()
  Tensor grad;   // view into ParamStore::flat_grads()
  int64_t offset = 0;  // element offset in the flat buffers (set by ParamStore::allocate)
  size_t index = 0;    // position in registration order
};

struct ShardInfo {
  ShardKind kind = ShardKind::Replicated;
  int tp_rank = 0;
  int tp_size = 1;
};

class ParamStore {
 public:
  // Declare a parameter. Shapes are checked for divisibility by the tp size.
  Parameter& add(const std::string& name, const Shape& full_shape, ShardInfo shard, InitKind init = InitKind::Normal);
  // Declares that consecutive parameters [first, last] are one fused GEMM
  // operand (see fused_value), so no gradient bucket boundary falls inside.
  void keep_together(const Parameter& first, const Parameter& last);
  // Allocate the flat buffers and bind every parameter's value/grad views.
  // The buffers are cut into gradient buckets of about `bucket_size` elements
  // (<= 0: one bucket), each padded to a multiple of `pad_to` (the dp size),
  // see grad_bucket_layout.h.
  void allocate(DType param_dtype, DType grad_dtype, Device device, int64_t pad_to = 1, int64_t bucket_size = 0);

  bool allocated() const { return flat_params_.defined(); }
  std::deque<Parameter>& params() { return params_; }
  const std::deque<Parameter>& params() const { return params_; }
  Parameter& get(const std::string& name);
  const Parameter* find(const std::string& name) const;
  Tensor& flat_params() { return flat_params_; }
  Tensor& flat_grads() { return flat_grads_; }
  int64_t numel() const { return numel_; }   // before padding
  // In the order backward completes them (reverse registration order).
  const std::vector<GradBucket>& grad_buckets() const { return buckets_; }

  // A view of consecutive parameters [first, last] as one [sum rows, cols]
  // matrix (for fused GEMMs); checks that they are adjacent with equal columns.
  Tensor fused_value(const Parameter& first, const Parameter& last) const;
  Tensor fused_grad(const Parameter& first, const Parameter& last) const;
  void zero_grads();

 private:
  Tensor fused(const Tensor& flat, const Parameter& first, const Parameter& last) const;
  std::deque<Parameter> params_;
  std::vector<bool> joined_to_next_;   // per parameter: must stay adjacent to the next one
  std::vector<GradBucket> buckets_;
  Tensor flat_params_, flat_grads_;
  int64_t numel_ = 0;
};

}  // namespace bb
