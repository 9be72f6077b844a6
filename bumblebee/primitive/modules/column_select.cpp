// ColumnSelect as a GEMM with a 0/1 matrix.
#include "bumblebee/primitive/modules/column_select.h"

#include "bumblebee/core/error.h"
#include "bumblebee/ops/ops.h"

namespace bb {

ColumnSelect::ColumnSelect(int64_t in, std::vector<int64_t> index) : in_(in), index_(std::move(index)) {
  BB_CHECK(in > 0 && !index_.empty(), "ColumnSelect needs input and output columns, got ", in, " -> ",
           index_.size());
  for (int64_t i : index_) BB_CHECK(i >= 0 && i < in, "ColumnSelect: column ", i, " outside [0, ", in, ")");
}

const Tensor& ColumnSelect::matrix_for(const Tensor& x) {
  if (matrix_.defined() && matrix_.dtype() == x.dtype() && matrix_.device() == x.device()) return matrix_;
  const int64_t n = out();
  std::vector<double> m(size_t(in_ * n), 0.0);
  for (int64_t j = 0; j < n; ++j) m[size_t(index_[size_t(j)] * n + j)] = 1.0;
  matrix_ = Tensor::from_doubles(m, {in_, n}, x.dtype()).to(x.device());
  return matrix_;
}

Tensor ColumnSelect::forward(const Tensor& x) {
  BB_CHECK(x.dim() == 2 && x.size(1) == in_, "ColumnSelect: input ", shape_str(x.shape()), " must be [N, ", in_, "]");
  Tensor y = Tensor::empty({x.size(0), out()}, x.dtype(), x.device());
  ops::matmul(x, false, matrix_for(x), false, y);
  return y;
}

void ColumnSelect::backward(const Tensor& dy, Tensor& dx, bool accumulate) {
  if (!accumulate) dx = Tensor::empty({dy.size(0), in_}, dy.dtype(), dy.device());
  ops::matmul(dy, false, matrix_for(dy), true, dx, 1.0, accumulate ? 1.0 : 0.0);
}

std::vector<int64_t> block_columns(int64_t groups, int64_t block, int64_t begin, int64_t count) {
  std::vector<int64_t> idx;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < count; ++c) idx.push_back(g * block + begin + c);
  return idx;
}

}  // namespace bb
