// TensorParallel region mappings (sequence parallel).
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

Tensor TensorParallel::enter(const Tensor& x) {
  if (size() == 1) return x;
  Shape s = x.shape();
  s[0] *= size();
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  group_->all_gather(x, out);
  return out;
}

Tensor TensorParallel::enter_backward(const Tensor& dx) {
  if (size() == 1) return dx;
  BB_CHECK(dx.size(0) % size() == 0, "sequence parallel: ", dx.size(0), " tokens are not divisible by tp ", size());
  Shape s = dx.shape();
  s[0] /= size();
  Tensor out = Tensor::empty(s, dx.dtype(), dx.device());
  group_->reduce_scatter(dx, out);
  return out;
}

Tensor TensorParallel::exit(const Tensor& y) { return enter_backward(y); }

Tensor TensorParallel::exit_backward(const Tensor& dy) { return enter(dy); }

void TensorParallel::reduce_replicated_grad(Tensor& grad) {
  if (size() > 1) group_->all_reduce(grad);
}

}  // namespace bb
