// backend.deterministic reaches the ops at build_model; on the CPU, whose ops
// are deterministic either way, it changes no bit of the loss or gradients
// (the CUDA side is checked by the op harness, bb_cuda_ops --filter deterministic).
#include <gtest/gtest.h>

#include "bumblebee/ops/deterministic.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

std::vector<double> gradients(bool deterministic, double& loss) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  cfg.backend_cfg.dtype = "float32";
  cfg.backend_cfg.deterministic = deterministic;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  EXPECT_EQ(ops::deterministic(), deterministic);
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  loss = rt->forward_backward(h, test::fixture_batch("qwen3_gqa")).loss;
  return test::all_grads(h);
}

TEST(Deterministic, BuildModelSetsTheOpsModeAndTheCpuResultIsUnchanged) {
  double loss_on = 0, loss_off = 0;
  const std::vector<double> on = gradients(true, loss_on);
  const std::vector<double> off = gradients(false, loss_off);
  EXPECT_EQ(loss_on, loss_off);
  EXPECT_EQ(on, off);
  EXPECT_GT(loss_off, 0.0);
}

}  // namespace
}  // namespace bb
