// Expert capacity: Megatron's capacity formula, the rows each expert keeps,
// and the SparseMoE block with dropping against float64 finite differences.
#include <gtest/gtest.h>

#include "../module_fixture.h"
#include "bumblebee/primitive/modules/moe/expert_capacity.h"
#include "bumblebee/primitive/modules/moe/router_aux_loss.h"

namespace bb {
namespace {

TEST(ExpertCapacity, CeilOfTokensTimesTopKOverExpertsTimesFactor) {
  EXPECT_EQ(expert_capacity(9, 2, 4, 0.5), 3);    // ceil(4.5 x 0.5)
  EXPECT_EQ(expert_capacity(8, 2, 4, 1.0), 4);
  EXPECT_EQ(expert_capacity(8, 2, 4, 1.25), 5);
  EXPECT_THROW(expert_capacity(8, 2, 4, 0.0), Error);
}

// Expert 0 has 4 rows for a capacity of 2: its two lowest weights go (the
// later of two equal ones); expert 1 is under capacity.
TEST(ExpertCapacity, DropsTheLowestWeightsBeyondCapacity) {
  const std::vector<double> w = {0.3, 0.1, 0.3, 0.9, 0.2, 0.4};
  const std::vector<double> keep = capacity_keep_mask(w, {4, 2}, 2);
  EXPECT_EQ(keep, (std::vector<double>{1, 0, 0, 1, 1, 1}));
}

TEST(SparseMoE, CapacityDropMatchesFiniteDifferences) {
  constexpr int64_t kTokens = 9, kHidden = 6, kFfn = 5, kExperts = 4, kTopK = 2;
  test::ModuleFixture fx;
  SparseMoEConfig cfg{kHidden, kFfn, kExperts, kTopK, true};
  cfg.capacity_factor = 0.5;
  auto moe = fx.make_sparse_moe(cfg);
  fx.allocate_and_init(71, 0.5);
  Generator gen(72);
  Tensor x = test::random_tensor(gen, {kTokens, kHidden});
  const std::vector<double> proj = test::random_vector(gen, kTokens * kHidden);
  const RouterLossConfig losses{true, AuxLossType::Megatron, 0.5, 0.0};
  auto loss = [&] {
    RouterAuxLoss aux(losses, 1.0);
    SequenceLayout seq;
    seq.router_aux = &aux;
    std::unique_ptr<BlockState> s;
    return test::project(moe->forward(x, seq, s), proj) + aux.loss();
  };
  RouterAuxLoss aux(losses, 1.0);
  SequenceLayout seq;
  seq.router_aux = &aux;
  std::unique_ptr<BlockState> s;
  moe->forward(x, seq, s);
  aux.finish();
  const auto& saved = static_cast<const SparseMoE::Saved&>(*s);
  const int64_t capacity = expert_capacity(kTokens, kTopK, kExperts, 0.5);
  int64_t expect_dropped = 0;
  for (int64_t c : saved.routing.rows_per_expert) expect_dropped += std::max<int64_t>(0, c - capacity);
  ASSERT_GT(expect_dropped, 0) << "the case drops nothing";
  ASSERT_EQ(aux.loads().size(), 1u);
  EXPECT_EQ(aux.loads()[0].dropped_rows, expect_dropped);
  int64_t zero_weights = 0;
  for (double w : saved.routing.row_weights.to_doubles()) zero_weights += w == 0.0 ? 1 : 0;
  EXPECT_EQ(zero_weights, expect_dropped);
  Tensor dx = moe->backward(Tensor::from_doubles(proj, {kTokens, kHidden}, DType::F64), seq, s);
  EXPECT_LT(test::sampled_gradient_error(loss, x, dx.to_doubles(), gen), 1e-9) << "dx";
  test::expect_parameter_gradients_match(fx, loss, gen, 1e-9);
}

}  // namespace
}  // namespace bb
