// Tests of the dispatch layer (ops_*.cpp, op_dispatch.h): device checks,
// undefined tensors, error messages that name the op and the tensor, and CUDA
// in a CPU-only build.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/ops/ops.h"
#include "op_error.h"

namespace bb {
namespace {

using test::error_of;

// A tensor that claims to live on CUDA, over host memory that is never read:
// every use below must fail before any data is touched.
Tensor fake_cuda_tensor(const Shape& shape, DType dt) {
  auto owner = std::make_shared<std::vector<char>>(size_t(shape_numel(shape)) * dtype_size(dt));
  return Tensor::wrap(owner->data(), shape, dt, Device::cuda(0), owner);
}

TEST(OpsDispatch, MixedDevicesNameTheTensors) {
  Tensor a = Tensor::zeros({2, 2}, DType::F32), c = Tensor::zeros({2, 2}, DType::F32);
  Tensor b = fake_cuda_tensor({2, 2}, DType::F32);
  const std::string msg = error_of([&] { ops::matmul(a, false, b, false, c); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
}

TEST(OpsDispatch, ErrorsNameOpAndTensor) {
  Tensor x = Tensor::zeros({3, 4}, DType::F64), w = Tensor::zeros({4}, DType::F64);
  Tensor y = Tensor::zeros({3, 4}, DType::F64), rstd = Tensor::zeros({2}, DType::F64);
  const std::string msg = error_of([&] { ops::rmsnorm_forward(x, w, 1e-6, y, rstd); });
  EXPECT_NE(msg.find("rmsnorm_forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'rstd'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  Tensor undefined;
  const std::string msg2 = error_of([&] { ops::swiglu_forward(undefined, y); });
  EXPECT_NE(msg2.find("'gate_up' is undefined"), std::string::npos) << msg2;
}

TEST(OpsDispatch, CudaTensorsInACpuOnlyBuildAreAnError) {
  if (cuda_built()) GTEST_SKIP() << "this build has the CUDA backend";
  Tensor x = fake_cuda_tensor({4}, DType::F32);
  const std::string msg = error_of([&] { ops::scale_(x, 2.0); });
  EXPECT_NE(msg.find("no CUDA backend"), std::string::npos) << msg;
  EXPECT_THROW(ops::sum(x), Error);
}

}  // namespace
}  // namespace bb
