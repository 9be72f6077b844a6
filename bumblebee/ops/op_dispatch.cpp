// The argument checks of op_dispatch.h.
#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {

Device common_device(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args) BB_CHECK(a.t.defined(), op, ": tensor '", a.name, "' is undefined");
  const Arg& first = *args.begin();
  for (const Arg& a : args) {
    BB_CHECK(a.t.device() == first.t.device(), op, ": tensor '", a.name, "' is on ", a.t.device().str(),
             " but '", first.name, "' is on ", first.t.device().str());
  }
  return first.t.device();
}

void expect_dim(const char* op, const Tensor& t, const char* name, int64_t dim) {
  BB_CHECK(t.dim() == dim, op, ": tensor '", name, "' must be ", dim, "-D, got shape ", shape_str(t.shape()));
}

void expect_shape(const char* op, const Tensor& t, const char* name, const Shape& shape) {
  BB_CHECK(t.shape() == shape, op, ": tensor '", name, "' has shape ", shape_str(t.shape()), ", expected ",
           shape_str(shape));
}

void expect_shape(const char* op, const Shape& shape, std::initializer_list<Arg> args) {
  for (const Arg& a : args) expect_shape(op, a.t, a.name, shape);
}

void expect_index(const char* op, const Tensor& t, const char* name) {
  BB_CHECK(t.dtype() == DType::I32 || t.dtype() == DType::I64, op, ": index tensor '", name,
           "' must be int32 or int64, got ", dtype_name(t.dtype()));
}

void expect_cpu_float(const char* op, const Arg& a) {
  BB_CHECK(a.t.dtype() == DType::F32 || a.t.dtype() == DType::F64, op,
           ": the CPU backend computes in float32 or float64, but tensor '", a.name, "' is ",
           dtype_name(a.t.dtype()));
}

void expect_cpu_same_float(const char* op, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  expect_cpu_float(op, first);
  for (const Arg& a : args) {
    BB_CHECK(a.t.dtype() == first.t.dtype(), op, ": CPU tensors of one call share a dtype, but '", a.name,
             "' is ", dtype_name(a.t.dtype()), " and '", first.name, "' is ", dtype_name(first.t.dtype()));
  }
}

void no_cuda_build(const std::string& op) {
  BB_FAIL(op, ": tensors are on CUDA but this Bumblebee build has no CUDA backend "
              "(configure found no CUDA toolkit, or BB_ENABLE_CUDA=OFF); use device=cpu or rebuild with CUDA");
}

}  // namespace bb::ops
