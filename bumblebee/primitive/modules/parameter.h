// Parameters, the groups they live in, and the flat buffers of each group.
//
// A model declares its parameters once, in registration order (ParamStore::add),
// and then allocates them into parameter groups. A group is the unit that the
// distributed optimizer reduces and shards: every parameter of a group is a
// view into the group's contiguous parameter buffer, and its gradient a view
// into the group's gradient buffer, in registration order. That makes the
// optimizer one multi-tensor pass per group, the gradient norm one reduction,
// data-parallel reduce-scatter a matter of cutting the buffer, and lets
// adjacent parameters (gate|up) act as one fused GEMM operand.
//
// Each group has its own gradient communicator (dense parameters reduce over
// dp, or dp x cp; expert parameters over the expert-data-parallel group), its
// own trainable flag (a frozen group has no gradient buffer, so its
// parameters' grad is undefined, and no optimizer state), and its own
// weight-decay and learning-rate multipliers. Which group a parameter joins is
// decided at allocation by a ParamGroupFn (primitive/optim/param_groups.h has
// the runtime's rule), so modules only declare what a parameter is.
//
// A parameter carries its Hugging Face name and how it is split over the
// tensor-parallel group, which is all checkpoint loading and export need.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/distributed/communicator.h"
#include "bumblebee/primitive/modules/grad_bucket_layout.h"

namespace bb {

enum class ShardKind {
  Replicated,   // the same full tensor on every tp rank
  Column,       // dim 0 split evenly over tp ranks
  Row,          // dim 1 split evenly over tp ranks
  Vocab,        // dim 0 split over tp ranks after padding to a multiple of tp
};

// KaimingUniform: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = dim 1 of
// the full tensor, torch's kaiming_uniform_(a=sqrt(5)) (peft's lora_A init).
enum class InitKind { Normal, Ones, Zeros, KaimingUniform };

// What a parameter is, for the choice of its group: dense parameters are
// replicated over data parallelism, expert parameters over the
// expert-data-parallel group; a buffer is state saved and loaded with the
// checkpoint but never trained by the optimizer (the router's expert bias,
// which its own balancing rule updates).
enum class ParamClass { Dense, Expert, Buffer };

class ParamGroup;
struct LoraConfig;

struct Parameter {
  std::string name;      // Hugging Face name
  Shape full_shape;      // shape in the Hugging Face checkpoint
  Shape local_shape;     // this rank's part (Vocab: padded rows included)
  ShardKind shard = ShardKind::Replicated;
  int64_t shard_begin = 0;   // first row (Column/Vocab) or column (Row) of the full tensor held here
  int64_t shard_valid = 0;   // rows/columns of the full tensor held here (Vocab: excludes padding)
  InitKind init = InitKind::Normal;
  ParamClass cls = ParamClass::Dense;
  bool replicated_over_tp() const { return shard == ShardKind::Replicated; }
  // False for a frozen parameter: its grad is undefined and backward skips it.
  bool requires_grad() const { return grad.defined(); }

  Tensor value;  // view into its group's flat parameter buffer
  Tensor grad;   // view into its group's flat gradient buffer; undefined when frozen
  size_t index = 0;          // position in registration order (over all groups)
  ParamGroup* group = nullptr;
  size_t group_index = 0;    // position inside its group
  int64_t offset = 0;        // element offset in the group's flat buffers
  // Set by zero_grads in a store that defers zeroing (ParamStore::defer_zero_grads):
  // grad holds stale values that stand for zeros until its first write.
  bool grad_pending_zero = false;
};

// Gradients zeroed lazily. In a store that defers zeroing, zero_grads only
// marks every gradient pending, and a backward writes each gradient's first
// contribution of the step instead of adding it to zeros: the step saves a
// pass over every gradient (the memset) and, for gradients a GEMM writes, the
// first microbatch's read of them.
//   grad_write_beta: the beta of a GEMM about to write the whole gradient of
//     every parameter in `ps` (the 0 of an overwrite when all are pending,
//     else 1; pending ones among others are zeroed first). Clears their flags.
//   grad_to_accumulate: p.grad for a write that adds into it (a scatter-add,
//     a sum over part of it), zeroed first if pending.
double grad_write_beta(Parameter& p);
double grad_write_beta(const std::vector<Parameter*>& ps);
Tensor& grad_to_accumulate(Parameter& p);

// A group's identity and optimizer settings. Parameters whose specs have the
// same name share a group; the other fields must then agree.
struct ParamGroupSpec {
  std::string name = "dense";
  bool trainable = true;
  double weight_decay_mult = 1.0;
  double lr_mult = 1.0;
  // Sums and shards this group's gradients (the dp, dp x cp or expert-dp
  // group); null means one rank. Its size pads every gradient bucket.
  dist::Communicator* grad_comm = nullptr;
};

// Decides the group of each parameter at allocation.
using ParamGroupFn = std::function<ParamGroupSpec(const Parameter&)>;

class ParamGroup {
 public:
  const ParamGroupSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  bool trainable() const { return spec_.trainable; }
  // In registration order.
  const std::vector<Parameter*>& params() const { return params_; }
  Tensor& flat_params() { return flat_params_; }
  Tensor& flat_grads() { return flat_grads_; }   // undefined when frozen
  // Points flat_params and every parameter's value at `flat` (same numel, any
  // dtype) and returns the buffer they viewed before. Training checkpoints
  // pass optimizer state through the model's HF mapping this way.
  Tensor swap_flat_params(Tensor flat);
  int64_t numel() const { return numel_; }        // before padding
  // In the order backward completes them (reverse registration order);
  // GradBucket::first_param/end_param index params().
  const std::vector<GradBucket>& grad_buckets() const { return buckets_; }

 private:
  friend class ParamStore;
  ParamGroupSpec spec_;
  std::vector<Parameter*> params_;
  std::vector<GradBucket> buckets_;
  Tensor flat_params_, flat_grads_;
  int64_t numel_ = 0;
};

struct ShardInfo {
  ShardKind kind = ShardKind::Replicated;
  int tp_rank = 0;
  int tp_size = 1;
};

class ParamStore {
 public:
  // Declare a parameter. Shapes are checked for divisibility by the tp size.
  Parameter& add(const std::string& name, const Shape& full_shape, ShardInfo shard, InitKind init = InitKind::Normal,
                 ParamClass cls = ParamClass::Dense);
  // Declares that consecutive parameters [first, last] are one fused GEMM
  // operand (see fused_value): they must land in one group, and no gradient
  // bucket boundary falls inside.
  void keep_together(const Parameter& first, const Parameter& last);
  // Sorts the parameters into groups (`groups` decides; empty: one trainable
  // group "dense" over one rank), allocates each group's flat buffers and binds
  // every parameter's value/grad views. Each group's buffers are cut into
  // gradient buckets of about `bucket_size` elements (<= 0: one bucket), each
  // padded to a multiple of the group's grad_comm size (see grad_bucket_layout.h).
  void allocate(const ParamGroupFn& groups, DType param_dtype, DType grad_dtype, Device device,
                int64_t bucket_size = 0);
  // One trainable group whose buckets are padded to a multiple of `pad_to`.
  void allocate(DType param_dtype, DType grad_dtype, Device device, int64_t pad_to = 1, int64_t bucket_size = 0);

  bool allocated() const { return !groups_.empty(); }
  std::deque<Parameter>& params() { return params_; }
  const std::deque<Parameter>& params() const { return params_; }
  Parameter& get(const std::string& name);
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  // In order of their first parameter.
  std::vector<std::unique_ptr<ParamGroup>>& groups() { return groups_; }
  const std::vector<std::unique_ptr<ParamGroup>>& groups() const { return groups_; }
  ParamGroup& group(const std::string& name);
  DType param_dtype() const;
  int64_t numel() const { return numel_; }   // every parameter, before padding

  // A view of consecutive parameters [first, last] as one [sum rows, cols]
  // matrix (for fused GEMMs); checks that they are adjacent with equal columns.
  // fused_grad is undefined when the parameters are frozen.
  Tensor fused_value(const Parameter& first, const Parameter& last) const;
  Tensor fused_grad(const Parameter& first, const Parameter& last) const;
  // grad_write_beta over the parameters [first, last] of a fused operand.
  double fused_grad_beta(const Parameter& first, const Parameter& last);
  // Zeroes every gradient, or with deferred zeroing marks each pending (see
  // grad_write_beta). A store defers only when its model's backward writes
  // every gradient through grad_write_beta or grad_to_accumulate, as the
  // built-in Decoder does; a plugin's store zeroes eagerly unless it asks.
  void zero_grads();
  void defer_zero_grads() { defer_zero_ = true; }
  // Zeroes the gradients still pending, in one memset per run of adjacent
  // ones: before anything reads gradients that a backward may not have written.
  void settle_grads();
  // The adapters that linear layers declare beside their weights (lora.h);
  // null: none. Set before the modules are built.
  void set_lora(std::shared_ptr<const LoraConfig> cfg) { lora_ = std::move(cfg); }
  const LoraConfig* lora() const { return lora_.get(); }

 private:
  Tensor fused(const Tensor& flat, const Parameter& first, const Parameter& last) const;
  void assign_groups(const ParamGroupFn& groups);
  void allocate_group(ParamGroup& g, DType param_dtype, DType grad_dtype, Device device, int64_t pad_to,
                      int64_t bucket_size);
  std::deque<Parameter> params_;
  std::map<std::string, size_t> index_of_;   // name -> position in params_ (a model has tens of thousands)
  std::vector<bool> joined_to_next_;   // per parameter: must stay adjacent to the next one
  std::vector<std::unique_ptr<ParamGroup>> groups_;
  int64_t numel_ = 0;
  std::shared_ptr<const LoraConfig> lora_;
  bool defer_zero_ = false;
};

}  // namespace bb
