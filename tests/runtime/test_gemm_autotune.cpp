// backend.gemm_autotune reaches the ops at build_model, and the runtime
// refuses it where a timing-dependent algorithm choice would break a
// guarantee: with backend.deterministic, and with tensor parallelism (the
// CUDA tuning itself is checked by the op harness, bb_cuda_ops --filter gemm).
#include <gtest/gtest.h>

#include "bumblebee/ops/gemm_autotune.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

RuntimeConfig autotuned() {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("qwen3_gqa");
  cfg.backend_cfg.dtype = "float32";
  cfg.backend_cfg.gemm_autotune = true;
  return cfg;
}

void expect_refused(const RuntimeConfig& cfg, const std::string& cause) {
  try {
    create_runtime(cfg);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cause), std::string::npos) << e.what();
  }
}

TEST(GemmAutotune, BuildModelSetsTheOpsMode) {
  auto rt = create_runtime(autotuned());
  rt->build_model();
  EXPECT_TRUE(ops::gemm_autotune());
  RuntimeConfig off = autotuned();
  off.backend_cfg.gemm_autotune = false;
  create_runtime(off)->build_model();
  EXPECT_FALSE(ops::gemm_autotune());
}

TEST(GemmAutotune, RefusedWithDeterministicModeAndTensorParallelism) {
  RuntimeConfig det = autotuned();
  det.backend_cfg.deterministic = true;
  expect_refused(det, "cannot be combined with backend.deterministic");
  RuntimeConfig tp = autotuned();
  tp.backend_cfg.parallel.tp = 2;
  expect_refused(tp, "backend.gemm_autotune needs backend.parallel.tp = 1 and etp = 1 (got tp 2, etp 2)");
  RuntimeConfig etp = autotuned();
  etp.backend_cfg.parallel.etp = 2;
  expect_refused(etp, "(got tp 1, etp 2)");
}

}  // namespace
}  // namespace bb
