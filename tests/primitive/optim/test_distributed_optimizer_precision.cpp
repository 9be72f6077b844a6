// The precision-aware optimizer state (optimizer.exp_avg_dtype,
// optimizer.exp_avg_sq_dtype, optimizer.main_params_dtype): the state is held
// in the chosen dtypes, a step is the adamw_step op on those buffers bit for
// bit, and bf16 choices on float parameters or with offload are refused
// naming the key.
#include <gtest/gtest.h>

#include <string>

#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/param_groups.h"

namespace bb {
namespace {

struct Model {
  explicit Model(DType param_dtype) : parallel(dist::ParallelState::single_rank()) {
    store.add("model.layers.0.mlp.up_proj.weight", {4, 3}, {});
    store.add("model.layers.0.mlp.down_proj.weight", {3, 4}, {});
    const DType grad_dtype = param_dtype == DType::F64 ? DType::F64 : DType::F32;
    store.allocate(make_param_groups(*parallel, ParamGroupOptions{}), param_dtype, grad_dtype, Device::cpu());
    int i = 0;
    for (Parameter& p : store.params()) {
      std::vector<double> v(size_t(p.value.numel()));
      for (double& x : v) x = 0.1 * double(++i % 7) - 0.3;
      p.value.copy_from(Tensor::from_doubles(v, p.value.shape(), DType::F64));
    }
  }
  void set_grads(int step) {
    int i = 0;
    for (Parameter& p : store.params()) {
      std::vector<double> g(size_t(p.grad.numel()));
      for (double& x : g) x = 0.01 * double((++i * (step + 3)) % 11) - 0.05;
      p.grad.copy_from(Tensor::from_doubles(g, p.grad.shape(), DType::F64));
    }
  }
  std::shared_ptr<dist::ParallelState> parallel;
  ParamStore store;
};

TEST(OptimizerPrecision, Bf16MomentsAndBf16MainParamsStepAsTheOpOnTheirBuffers) {
  Model m(DType::BF16);
  AdamWConfig cfg;
  cfg.clip_grad = 0.0;
  cfg.bf16_exp_avg = cfg.bf16_exp_avg_sq = cfg.bf16_main_params = true;
  DistributedOptimizer opt(m.store, *m.parallel, cfg);
  ASSERT_EQ(opt.groups().size(), 1u);
  DistributedOptimizer::GroupState& g = opt.groups()[0];
  EXPECT_TRUE(g.master_is_param);   // no fp32 copy: the bf16 weights are the master
  EXPECT_EQ(g.master.dtype(), DType::BF16);
  EXPECT_EQ(g.exp_avg.dtype(), DType::BF16);
  EXPECT_EQ(g.exp_avg_sq.dtype(), DType::BF16);
  // The same op on copies of the buffers.
  Tensor p = g.group->flat_params().to(DType::BF16).to(DType::F32).to(DType::BF16);
  Tensor ma = Tensor::zeros({p.numel()}, DType::BF16), va = Tensor::zeros({p.numel()}, DType::BF16);
  for (int step = 1; step <= 3; ++step) {
    opt.invalidate_grads();
    m.set_grads(step);
    for (Parameter& prm : m.store.params()) opt.grad_ready(prm);
    const OptimizerStepResult r = opt.step(1e-2);
    ASSERT_TRUE(r.update_successful);
    ops::AdamWParams hp;
    hp.lr = 1e-2;
    hp.beta1 = cfg.beta1;
    hp.beta2 = cfg.beta2;
    hp.eps = cfg.eps;
    hp.weight_decay = cfg.weight_decay;
    hp.step = step;
    ops::adamw_step(p, g.group->flat_grads(), ma, va, hp);
    EXPECT_EQ(g.group->flat_params().to_doubles(), p.to_doubles()) << "step " << step;
    EXPECT_EQ(g.exp_avg.to_doubles(), ma.to_doubles()) << "step " << step;
    EXPECT_EQ(g.exp_avg_sq.to_doubles(), va.to_doubles()) << "step " << step;
  }
  // A checkpoint's fp32 moments load into the bf16 state, converted.
  Tensor full = Tensor::from_doubles(std::vector<double>(size_t(p.numel()), 0.25), {p.numel()}, DType::F32);
  opt.scatter_state(g, DistributedOptimizer::State::ExpAvg, full);
  EXPECT_EQ(opt.gather_state(g, DistributedOptimizer::State::ExpAvg).dtype(), DType::BF16);
  EXPECT_EQ(g.exp_avg.to_doubles(), full.to_doubles());
}

TEST(OptimizerPrecision, Bf16MomentsKeepAnFp32Master) {
  Model m(DType::BF16);
  AdamWConfig cfg;
  cfg.bf16_exp_avg_sq = true;
  DistributedOptimizer opt(m.store, *m.parallel, cfg);
  DistributedOptimizer::GroupState& g = opt.groups()[0];
  EXPECT_FALSE(g.master_is_param);
  EXPECT_EQ(g.master.dtype(), DType::F32);
  EXPECT_EQ(g.exp_avg.dtype(), DType::F32);
  EXPECT_EQ(g.exp_avg_sq.dtype(), DType::BF16);
}

void expect_error_naming(const std::function<void()>& fn, const std::string& key) {
  try {
    fn();
    FAIL() << "expected an error naming " << key;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
  }
}

TEST(OptimizerPrecision, Bf16StateOnFloatParametersOrWithOffloadNamesTheKey) {
  for (DType dt : {DType::F64, DType::F32}) {
    Model m(dt);
    AdamWConfig cfg;
    cfg.bf16_exp_avg = true;
    expect_error_naming([&] { DistributedOptimizer opt(m.store, *m.parallel, cfg); }, "optimizer.exp_avg_dtype");
    cfg = AdamWConfig{};
    cfg.bf16_main_params = true;
    expect_error_naming([&] { DistributedOptimizer opt(m.store, *m.parallel, cfg); }, "optimizer.main_params_dtype");
  }
  Model m(DType::BF16);
  AdamWConfig cfg;
  cfg.bf16_exp_avg_sq = true;
  cfg.offload_fraction = 0.5;
  expect_error_naming([&] { DistributedOptimizer opt(m.store, *m.parallel, cfg); }, "optimizer.offload_fraction");
}

}  // namespace
}  // namespace bb
