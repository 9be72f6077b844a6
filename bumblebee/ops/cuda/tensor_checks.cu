// Host-side checks shared by the CUDA op launchers: device placement and dtype.
#include "bumblebee/ops/cuda/cuda_common.cuh"

#include <sstream>

namespace bb::cuda {

void check_cuda(const Tensor& t, const char* op, const char* name) {
  BB_CHECK(t.defined(), op, ": tensor ", name, " is undefined");
  BB_CHECK(t.device().is_cuda(), op, ": tensor ", name, " is on ", t.device().str(),
           ", the CUDA backend needs it on a CUDA device");
}

void check_cuda_same(const Tensor& a, const Tensor& b, const char* op, const char* name_b) {
  check_cuda(b, op, name_b);
  BB_CHECK(a.device() == b.device(), op, ": tensor ", name_b, " is on ", b.device().str(), " but the op runs on ",
           a.device().str());
}

void check_dtype_in(const Tensor& t, const char* op, const char* name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype() == d) return;
  std::ostringstream os;
  bool first = true;
  for (DType d : allowed) {
    os << (first ? "" : " or ") << dtype_name(d);
    first = false;
  }
  BB_FAIL(op, ": tensor ", name, " must be ", os.str(), " on CUDA, got ", dtype_name(t.dtype()));
}

}  // namespace bb::cuda
