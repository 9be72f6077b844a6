// fp32_residual_connection keeps a bfloat16 run's residual stream in float32;
// float32 and float64 runs already have it at least that wide, so there the
// switch must change nothing (the CUDA side is checked by the op harness and
// the bf16 parity run, benchmarks/RESULTS.md).
#include <gtest/gtest.h>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

std::vector<double> gradients(const std::string& dtype, bool fp32_residual, double& loss) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  cfg.backend_cfg.dtype = dtype;
  cfg.backend_cfg.fp32_residual_connection = fp32_residual;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  loss = rt->forward_backward(h, test::fixture_batch("qwen3_gqa")).loss;
  return test::all_grads(h);
}

TEST(Fp32Residual, ChangesNothingForFloat32AndFloat64Runs) {
  for (const std::string dtype : {"float32", "float64"}) {
    double loss_off = 0, loss_on = 0;
    const std::vector<double> off = gradients(dtype, false, loss_off);
    const std::vector<double> on = gradients(dtype, true, loss_on);
    EXPECT_EQ(loss_on, loss_off) << dtype;
    EXPECT_EQ(on, off) << dtype;
    EXPECT_GT(loss_off, 0.0) << dtype;
  }
}

}  // namespace
}  // namespace bb
