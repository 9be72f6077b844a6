// ColumnSelect over ops::gather_columns / ops::scatter_add_columns.
#include "bumblebee/primitive/modules/column_select.h"

#include "bumblebee/core/error.h"

namespace bb {

ColumnSelect::ColumnSelect(int64_t in, std::vector<int64_t> index) : in_(in), index_(std::move(index)) {
  BB_CHECK(in > 0 && !index_.empty(), "ColumnSelect needs input and output columns, got ", in, " -> ",
           index_.size());
  for (int64_t i : index_) BB_CHECK(i >= 0 && i < in, "ColumnSelect: column ", i, " outside [0, ", in, ")");
}

const ops::ColumnIndex& ColumnSelect::index_on(Device device) {
  if (!device_index_.index.defined() || device_index_.index.device() != device)
    device_index_ = ops::make_column_index(in_, index_, device);
  return device_index_;
}

Tensor ColumnSelect::forward(const Tensor& x) {
  BB_CHECK(x.dim() == 2 && x.size(1) == in_, "ColumnSelect: input ", shape_str(x.shape()), " must be [N, ", in_, "]");
  Tensor y = Tensor::empty({x.size(0), out()}, x.dtype(), x.device());
  ops::gather_columns(x, index_on(x.device()), y);
  return y;
}

void ColumnSelect::backward(const Tensor& dy, Tensor& dx, bool accumulate) {
  BB_CHECK(dy.dim() == 2 && dy.size(1) == out(), "ColumnSelect::backward: gradient ", shape_str(dy.shape()),
           " must be [N, ", out(), "]");
  if (!accumulate) dx = Tensor::empty({dy.size(0), in_}, dy.dtype(), dy.device());
  ops::scatter_add_columns(dy, index_on(dy.device()), dx, accumulate);
}

std::vector<int64_t> block_columns(int64_t groups, int64_t block, int64_t begin, int64_t count) {
  std::vector<int64_t> idx;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < count; ++c) idx.push_back(g * block + begin + c);
  return idx;
}

}  // namespace bb
