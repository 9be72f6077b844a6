// Parameter groups: the runtime's grouping rule, a frozen group (no gradient
// buffer, no optimizer state, values untouched by a step), per-group weight
// decay, and the gradient norm counting every trainable parameter once.
#include <gtest/gtest.h>

#include <cmath>

#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/param_groups.h"

namespace bb {
namespace {

struct Model {
  explicit Model(const ParamGroupOptions& options) : parallel(dist::ParallelState::single_rank()) {
    store.add("model.embed_tokens.weight", {4, 3}, {});
    store.add("model.layers.0.input_layernorm.weight", {3}, {}, InitKind::Ones);
    store.add("model.layers.0.mlp.up_proj.weight", {2, 3}, {});
    store.add("model.layers.0.mlp.up_proj.bias", {2}, {});
    store.add("model.layers.0.mlp.experts.0.weight", {2, 3}, {}, InitKind::Normal, ParamClass::Expert);
    store.allocate(make_param_groups(*parallel, options), DType::F64, DType::F64, Device::cpu());
    for (Parameter& p : store.params()) {
      p.value.fill_(1.0);
      if (p.requires_grad()) p.grad.fill_(double(p.index + 1));
    }
  }
  std::shared_ptr<dist::ParallelState> parallel;
  ParamStore store;
};

TEST(ParamGroups, DenseExpertNoDecayAndFrozenGroups) {
  ParamGroupOptions o;
  o.no_weight_decay_1d = true;
  o.frozen = {"model\\.embed_tokens\\..*"};
  Model m(o);
  std::vector<std::string> names;
  for (auto& g : m.store.groups()) names.push_back(g->name());
  EXPECT_EQ(names, (std::vector<std::string>{"frozen", "dense_no_wd", "dense", "expert"}));
  EXPECT_FALSE(m.store.group("frozen").trainable());
  EXPECT_FALSE(m.store.group("frozen").flat_grads().defined());
  EXPECT_FALSE(m.store.get("model.embed_tokens.weight").requires_grad());
  EXPECT_EQ(m.store.group("dense_no_wd").spec().weight_decay_mult, 0.0);
  EXPECT_EQ(m.store.group("dense_no_wd").params().size(), 2u);   // the norm weight and the bias
  EXPECT_EQ(m.store.group("dense").spec().weight_decay_mult, 1.0);
  EXPECT_EQ(m.store.group("dense").spec().grad_comm, &m.parallel->dp());
  EXPECT_EQ(m.store.group("expert").spec().grad_comm, &m.parallel->edp());
  EXPECT_EQ(m.store.get("model.layers.0.mlp.up_proj.bias").group, &m.store.group("dense_no_wd"));
}

TEST(ParamGroups, WithoutOptionsEveryDenseParameterSharesOneGroup) {
  Model m(ParamGroupOptions{});
  ASSERT_EQ(m.store.groups().size(), 2u);
  EXPECT_EQ(m.store.groups()[0]->name(), "dense");
  EXPECT_EQ(m.store.groups()[0]->params().size(), 4u);
  EXPECT_EQ(m.store.groups()[1]->name(), "expert");
}

// A buffer (the router's expert bias) is state, not a trained parameter.
TEST(ParamGroups, BuffersHaveTheirOwnFrozenGroup) {
  auto parallel = dist::ParallelState::single_rank();
  ParamStore store;
  store.add("model.layers.0.mlp.gate.weight", {4, 3}, {});
  store.add("model.layers.0.mlp.gate.e_score_correction_bias", {4}, {}, InitKind::Zeros, ParamClass::Buffer);
  store.allocate(make_param_groups(*parallel, ParamGroupOptions{}), DType::F64, DType::F64, Device::cpu());
  EXPECT_FALSE(store.group("buffer").trainable());
  EXPECT_FALSE(store.get("model.layers.0.mlp.gate.e_score_correction_bias").requires_grad());
  EXPECT_TRUE(store.get("model.layers.0.mlp.gate.weight").requires_grad());
}

TEST(ParamGroups, AnInvalidFrozenPatternNamesIt) {
  ParamGroupOptions o;
  o.frozen = {"model.(layers"};
  try {
    Model m(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.(layers"), std::string::npos) << e.what();
  }
}

TEST(ParamGroups, OptimizerStepsTrainableGroupsWithTheirOwnWeightDecay) {
  ParamGroupOptions o;
  o.no_weight_decay_1d = true;
  o.frozen = {"model\\.embed_tokens\\..*"};
  Model m(o);
  AdamWConfig cfg;
  cfg.weight_decay = 0.5;
  cfg.clip_grad = 0.0;
  DistributedOptimizer opt(m.store, *m.parallel, cfg);
  EXPECT_EQ(opt.groups().size(), 3u);   // no state for the frozen group
  for (Parameter& p : m.store.params())
    if (p.requires_grad()) opt.grad_ready(p);
  opt.check_all_reported();
  // Only trainable gradients count: grads are index + 1 over each parameter's elements.
  double expect_sq = 0;
  for (const Parameter& p : m.store.params())
    if (p.requires_grad()) expect_sq += double(shape_numel(p.local_shape)) * double((p.index + 1) * (p.index + 1));
  const double lr = 0.1;
  const OptimizerStepResult r = opt.step(lr);
  EXPECT_TRUE(r.update_successful);
  EXPECT_NEAR(r.grad_norm, std::sqrt(expect_sq), 1e-12);
  // One Adam step moves every trained element by lr (m / sqrt(v) = 1) after decoupled decay.
  for (const Parameter& p : m.store.params()) {
    const double wd = p.group->spec().weight_decay_mult * cfg.weight_decay;
    const double expect = p.requires_grad() ? 1.0 - lr * wd - lr : 1.0;
    for (double v : p.value.to_doubles()) EXPECT_NEAR(v, expect, 1e-7) << p.name;
  }
}

TEST(ParamGroups, AFusedOperandCannotStraddleGroups) {
  auto parallel = dist::ParallelState::single_rank();
  ParamStore store;
  Parameter& a = store.add("gate.weight", {2, 3}, {});
  Parameter& b = store.add("up.weight", {2, 3}, {});
  store.keep_together(a, b);
  ParamGroupOptions o;
  o.frozen = {"up\\.weight"};
  EXPECT_THROW(store.allocate(make_param_groups(*parallel, o), DType::F64, DType::F64, Device::cpu()), Error);
}

}  // namespace
}  // namespace bb
