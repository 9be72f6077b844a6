// Format version 4 training checkpoints still load (runtime/checkpoint_v4.h):
// one is built by hand as version 4 wrote them (the model and each optimizer
// part as an HF folder of full tensors, trainer_state.json with
// optimizer_tensors, a manifest), loaded by this build, and its parameters,
// master weights, moments and step come back; saved again, it is format 5.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;
using State = DistributedOptimizer::State;

// The value of element i of Adam moment `part` (1, 2): distinct per part and per element.
double pattern(int part, int64_t i) { return 0.001 * double(part + 1) + 1e-7 * double(i); }

TEST(CheckpointV4, AVersion4CheckpointStillLoads) {
  RuntimeConfig cfg;
  cfg.hf_path = test::fixture_dir("llama3_gqa");
  cfg.backend_cfg.dtype = "float64";
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const fs::path dir = fs::temp_directory_path() / ("bb_ckpt_v4_" + std::to_string(::getpid()));
  fs::remove_all(dir);

  const char* parts[] = {"master", "exp_avg", "exp_avg_sq"};
  nlohmann::json recorded;
  std::vector<std::pair<std::string, Tensor>> model;
  std::vector<std::vector<std::pair<std::string, Tensor>>> optimizer(3);
  for (const Parameter& p : h.model().params().params()) {
    const Tensor value = p.value.narrow(0, p.full_shape[0]).clone();   // tp 1: the full tensor
    model.emplace_back(p.name, value);
    // The master weights are the parameters (as a save wrote them); the moments a pattern.
    for (int k = 0; k < 3; ++k) {
      std::vector<double> v = value.to_doubles();
      if (k > 0)
        for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(k, int64_t(i));
      optimizer[size_t(k)].emplace_back(p.name, Tensor::from_doubles(v, p.full_shape, DType::F64));
      recorded[parts[k]][p.name] = {{"shape", p.full_shape}, {"dtype", dtype_name(DType::F64)}};
    }
  }
  save_hf_checkpoint((dir / "model").string(), model);
  fs::copy_file(cfg.hf_path + "/config.json", dir / "model" / "config.json");
  for (int k = 0; k < 3; ++k) save_hf_checkpoint((dir / "optimizer" / parts[k]).string(), optimizer[size_t(k)]);
  const nlohmann::json state = {{"format_version", 4},
                                {"steps_taken", 3},
                                {"scheduler_steps", 3},
                                {"layout", {{"frozen_params", h.state().cfg.frozen_params}}},
                                {"optimizer_tensors", recorded},
                                {"model_config", h.model().config()}};
  std::ofstream(dir / "trainer_state.json") << state.dump(2);
  write_checkpoint_manifest(dir.string());

  for (Parameter& p : h.model().params().params()) p.value.fill_(0.0);
  EXPECT_EQ(rt->load_checkpoint(h, dir.string()), 3);
  for (const auto& [name, value] : model) {
    const Parameter& p = h.model().params().get(name);
    EXPECT_EQ(p.value.narrow(0, p.full_shape[0]).to_doubles(), value.to_doubles()) << name;
  }
  DistributedOptimizer& opt = *h.state().optimizer;
  for (int k = 0; k < 3; ++k) {
    const State which = k == 0 ? State::Master : k == 1 ? State::ExpAvg : State::ExpAvgSq;
    for (DistributedOptimizer::GroupState& g : opt.groups()) {
      const std::vector<double> flat = opt.gather_state(g, which).to_doubles();
      for (const Parameter* p : g.group->params()) {
        const std::vector<double> value = p->value.to_doubles();
        for (int64_t i = 0; i < shape_numel(p->full_shape); i += 7)
          ASSERT_EQ(flat[size_t(p->offset + i)], k == 0 ? value[size_t(i)] : pattern(k, i))
              << parts[k] << " " << p->name << " " << i;
      }
    }
  }
  rt->save_checkpoint(h, dir.string());
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "trainer_state.json")).at("format_version"), 5);
  EXPECT_TRUE(fs::exists(dir / "state" / "metadata.json"));
  EXPECT_FALSE(fs::exists(dir / "optimizer"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bb
