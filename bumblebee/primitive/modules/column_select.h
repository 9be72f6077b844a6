// ColumnSelect: a fixed gather of columns, y[:, j] = x[:, index[j]], as
// ops::gather_columns, and its backward, ops::scatter_add_columns (a copy
// forward and a fixed-order sum backward: exact in every dtype, and the
// same bits on every run where an index repeats).
//
// Multi-head latent attention needs it to split its projections per head
// ([k_nope | v] of kv_b_proj, [q_nope | q_rope] of q_b_proj), to join
// [nope | rope] again for the attention kernel, to broadcast the shared
// k_rope to every head and to undo DeepSeek's interleaved rope layout. The
// index is checked at construction and uploaded once, on the first call, to
// the device of the tensors it selects from.
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/ops.h"

namespace bb {

class ColumnSelect {
 public:
  // `index[j]` in [0, in): the input column output column j takes.
  ColumnSelect(int64_t in, std::vector<int64_t> index);
  int64_t in() const { return in_; }
  int64_t out() const { return int64_t(index_.size()); }
  // x [N, in] -> [N, out].
  Tensor forward(const Tensor& x);
  // dx [N, in] (+)= the scatter of dy [N, out] back to the columns it came from.
  void backward(const Tensor& dy, Tensor& dx, bool accumulate);

 private:
  int64_t in_;
  std::vector<int64_t> index_;
  ops::ColumnIndex device_index_;   // index_ on the device of the last call
  const ops::ColumnIndex& index_on(Device device);
};

// Columns [begin, begin + count) of each of `groups` consecutive blocks of
// width `block`: the per-head part of a [N, groups * block] projection, as
// [N, groups * count].
std::vector<int64_t> block_columns(int64_t groups, int64_t block, int64_t begin, int64_t count);

}  // namespace bb
