// Shared pieces of the parallel-parity tests (tp x dp, ep, pp, cp): relative
// error, a tokens file of random ids for bb-correctness, and the comparisons of
// a parallel run's bb-correctness output and parameters with the single-rank run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bumblebee/core/rng.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "tests/tools/scratch_dir.h"

namespace bb::test {

inline double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-300); }

// `rows` sequences of `len` ids below `vocab`, drawn from `seed`, in a
// file named after `name` in the process's scratch directory.
inline std::string random_tokens_file(const std::string& name, uint64_t seed, int rows, int len, int vocab) {
  const std::string path = (process_scratch_dir() / (name + ".json")).string();
  Generator gen(seed);
  nlohmann::json j = nlohmann::json::array();
  for (int s = 0; s < rows; ++s) {
    nlohmann::json row = nlohmann::json::array();
    for (int t = 0; t < len; ++t) row.push_back(int(gen.next_u64() % uint64_t(vocab)));
    j.push_back(row);
  }
  std::ofstream(path) << j.dump();
  return path;
}

// Loss, grad norm, aux loss (when present), every step's loss and grad norm
// (when present) and every per-parameter grad norm, to `tol` relative.
inline void expect_same_run(const nlohmann::json& par, const nlohmann::json& single, const std::string& tag,
                            double tol = 1e-10) {
  EXPECT_LT(test::rel(par["loss"], single["loss"]), tol) << tag;
  EXPECT_LT(test::rel(par["grad_norm"], single["grad_norm"]), tol) << tag;
  if (single.contains("aux_loss")) EXPECT_LT(test::rel(par["aux_loss"], single["aux_loss"]), tol) << tag;
  ASSERT_EQ(par["losses"].size(), single["losses"].size()) << tag;
  for (size_t i = 0; i < single["losses"].size(); ++i) {
    EXPECT_LT(test::rel(par["losses"][i], single["losses"][i]), tol) << tag << " step " << i;
    if (single.contains("grad_norms"))
      EXPECT_LT(test::rel(par["grad_norms"][i], single["grad_norms"][i]), tol) << tag << " step " << i;
  }
  ASSERT_EQ(par["per_param_grad_norm"].size(), single["per_param_grad_norm"].size()) << tag;
  for (const auto& [name, norm] : single["per_param_grad_norm"].items()) {
    ASSERT_TRUE(par["per_param_grad_norm"].contains(name)) << tag << " lacks " << name;
    EXPECT_LT(test::rel(par["per_param_grad_norm"][name], norm), tol) << tag << " " << name;
  }
}

// Two HF directories hold the same tensors, equal to 1e-10 of each tensor's largest value.
inline void expect_same_params(const std::string& a, const std::string& b, const std::string& what) {
  HFCheckpoint x = HFCheckpoint::open(a), y = HFCheckpoint::open(b);
  ASSERT_EQ(x.names(), y.names()) << what;
  for (const std::string& n : x.names()) {
    const std::vector<double> u = x.get(n).to_doubles(), v = y.get(n).to_doubles();
    double err = 0, norm = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      err = std::max(err, std::abs(u[i] - v[i]));
      norm = std::max(norm, std::abs(v[i]));
    }
    EXPECT_LT(err / norm, 1e-10) << what << " parameter " << n;
  }
}

}  // namespace bb::test
