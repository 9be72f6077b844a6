// ColumnSelect: a fixed gather of columns, y[:, j] = x[:, index[j]], done as
// one GEMM with a 0/1 matrix so that it runs on every backend with the op
// surface as it is (tensors are row-major contiguous, and ops.h has no
// strided column copy).
//
// Multi-head latent attention needs it to split its projections per head
// ([k_nope | v] of kv_b_proj, [q_nope | q_rope] of q_b_proj), to join
// [nope | rope] again for the attention kernel, to broadcast the shared
// k_rope to every head and to undo DeepSeek's interleaved rope layout. Each
// output column has exactly one 1 in its column of the matrix, so the
// product is exact in every dtype (one nonzero term, accumulated in fp32 or
// better). The cost is rows x in x out multiply-adds; a fused column copy in
// ops/ would remove it (docs/models.md, deepseek_v3).
#pragma once

#include <cstdint>
#include <vector>

#include "bumblebee/core/tensor.h"

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
  Tensor matrix_;   // [in, out] in the dtype and on the device of the last call
  const Tensor& matrix_for(const Tensor& x);
};

// Columns [begin, begin + count) of each of `groups` consecutive blocks of
// width `block`: the per-head part of a [N, groups * block] projection, as
// [N, groups * count].
std::vector<int64_t> block_columns(int64_t groups, int64_t block, int64_t begin, int64_t count);

}  // namespace bb
