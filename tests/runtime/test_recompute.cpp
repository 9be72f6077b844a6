// Activation recomputation changes memory, never numbers: selective (core
// attention) and full-layer recompute give the gradients of recompute=none.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"
#include "tests/runtime/model_grads.h"

namespace bb {
namespace {

std::vector<double> gradients(const std::string& recompute, double& loss) {
  RuntimeConfig cfg;
  cfg.backend = "ref";
  cfg.hf_path = test::fixture_dir("llama3_gqa");
  cfg.backend_cfg.recompute = recompute;
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  auto train = rt->train_mode(h);
  rt->zero_grad(h);
  loss = rt->forward_backward(h, test::fixture_batch("llama3_gqa")).loss;
  return test::all_grads(h);
}

TEST(Recompute, SelectiveAndFullMatchNone) {
  double loss_none = 0;
  const std::vector<double> none = gradients("none", loss_none);
  for (const std::string mode : {"selective", "full"}) {
    double loss = 0;
    const std::vector<double> g = gradients(mode, loss);
    EXPECT_EQ(loss, loss_none) << mode;
    ASSERT_EQ(g.size(), none.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      err = std::max(err, std::abs(g[i] - none[i]));
      norm = std::max(norm, std::abs(none[i]));
    }
    EXPECT_LT(err / norm, 1e-14) << mode;
  }
}

TEST(Recompute, UnknownModeNamesTheChoices) {
  double loss = 0;
  try {
    gradients("partial", loss);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected none, selective or full"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
