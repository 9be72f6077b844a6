// The optimizer precision keys at the runtime: on the CPU runtime (float32
// or float64 parameters) a bf16 state or gradient choice is an error naming
// its key.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

void expect_build_error(const std::function<void(OptimizerConfig&)>& set, const std::string& dtype,
                        const std::string& message) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("llama3_gqa");
  cfg.backend_cfg.device = "cpu";
  cfg.backend_cfg.dtype = dtype;
  set(cfg.backend_cfg.optimizer);
  try {
    auto rt = create_runtime(cfg);
    rt->build_model();
    ADD_FAILURE() << "no error, expected one containing: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(OptimizerPrecision, Bf16StateOnTheCpuRuntimeNamesTheKey) {
  for (const std::string dtype : {"float32", "float64"}) {
    expect_build_error([](OptimizerConfig& o) { o.exp_avg_dtype = "bf16"; }, dtype,
                       "optimizer.exp_avg_dtype=bf16 needs bf16 parameters");
    expect_build_error([](OptimizerConfig& o) { o.exp_avg_sq_dtype = "bf16"; }, dtype,
                       "optimizer.exp_avg_sq_dtype=bf16 needs bf16 parameters");
    expect_build_error([](OptimizerConfig& o) { o.main_params_dtype = "bf16"; }, dtype,
                       "optimizer.main_params_dtype=bf16 needs bf16 parameters");
  }
}

TEST(OptimizerPrecision, Bf16MainGradsOnTheCpuRuntimeNamesTheKey) {
  for (const std::string dtype : {"float32", "float64"})
    expect_build_error([](OptimizerConfig& o) { o.main_grads_dtype = "bf16"; }, dtype,
                       "optimizer.main_grads_dtype=bf16 needs bf16 parameters");
}

}  // namespace
}  // namespace bb
