// TokenDispatcher under mpirun (2, 4 and 8 ranks), at every ep x etp that
// divides the world (and ep the 8 experts): dispatch puts each local expert's
// rows together (from every etp rank of the group, then every source rank of
// its ep group, in rank order), combine sums the etp copies back onto the
// input (etp x the input when every etp rank hands back the same rows, the
// input itself when one does and the others hand back zeros), and the two
// are each other's adjoints (so the MoE block's backward, which runs them in
// reverse, restores the gradient); an ep that does not divide the expert
// count is an error on every rank.
#include <gtest/gtest.h>

#include "bumblebee/core/rng.h"
#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/distributed/rank_layout.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/primitive/modules/moe/token_dispatcher.h"

namespace bb {
namespace {

constexpr int64_t kExperts = 8, kCols = 3;

// Rows rank r routes to expert e: 0 to 3, so some experts get none.
int64_t rows_for(int r, int64_t e) { return (r * 3 + e * 5) % 4; }

// Row k of rank r's rows for expert e: r * 1e4 + e * 100 + k, then the column.
double row_value(int r, int64_t e, int64_t k, int64_t col) { return r * 1e4 + double(e) * 100 + double(k) + col * 0.1; }

Tensor rows_of_rank(int r, std::vector<int64_t>& per_expert) {
  std::vector<double> v;
  per_expert.assign(size_t(kExperts), 0);
  for (int64_t e = 0; e < kExperts; ++e) {
    per_expert[size_t(e)] = rows_for(r, e);
    for (int64_t k = 0; k < rows_for(r, e); ++k)
      for (int64_t c = 0; c < kCols; ++c) v.push_back(row_value(r, e, k, c));
  }
  return Tensor::from_doubles(v, {int64_t(v.size()) / kCols, kCols}, DType::F64);
}

Tensor random_like(int64_t rows, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(size_t(rows * kCols));
  for (double& x : v) x = double(gen.next_u64() % 1000) / 1000.0;
  return Tensor::from_doubles(v, {rows, kCols}, DType::F64);
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<double> u = a.to_doubles(), w = b.to_doubles();
  double s = 0;
  for (size_t i = 0; i < u.size(); ++i) s += u[i] * w[i];
  return s;
}

// The world ranks of the group of `kind` that holds `world_rank`, in group-rank order.
std::vector<int> group_of(const dist::ParallelLayout& layout, dist::GroupKind kind, int world_rank) {
  const std::vector<std::vector<int>> groups = dist::group_ranks(layout, kind);
  return groups[size_t(dist::find_group(groups, world_rank).group_index)];
}

TEST(TokenDispatcherMpi, RoundTripAtEveryEpAndEtp) {
  dist::World& world = dist::World::instance();
  for (int etp = 1; etp <= world.size(); etp *= 2)
    for (int ep = 1; ep * etp <= world.size(); ep *= 2) {
      if (ep * etp == 1 || world.size() % (ep * etp) != 0 || kExperts % ep != 0) continue;
      const std::string tag = "ep " + std::to_string(ep) + " etp " + std::to_string(etp);
      auto ps = dist::ParallelState::create(world, {1, 1, ep, etp, 1});
      const TokenDispatcher d(ps->ep(), ps->etp(), kExperts);
      ASSERT_EQ(d.local_experts(), kExperts / ep) << tag;
      std::vector<int64_t> per_expert;
      const Tensor x = rows_of_rank(world.rank(), per_expert);
      const TokenDispatcher::Plan plan = d.plan(per_expert);
      const Tensor local = d.dispatch(plan, x);

      // Local expert l's rows: for each rank t of this rank's etp group, the
      // rows of every rank of t's ep group for it, in rank order.
      const std::vector<double> got = local.to_doubles();
      size_t at = 0;
      for (int64_t l = 0; l < d.local_experts(); ++l) {
        const int64_t e = d.first_local_expert() + l;
        EXPECT_EQ(plan.local_offsets[size_t(l)], int64_t(at / kCols)) << tag << " expert " << e;
        for (int t : group_of(ps->layout(), dist::GroupKind::ETP, world.rank()))
          for (int s : group_of(ps->layout(), dist::GroupKind::EP, t))
            for (int64_t k = 0; k < rows_for(s, e); ++k)
              for (int64_t c = 0; c < kCols; ++c, ++at)
                ASSERT_EQ(got[at], row_value(s, e, k, c)) << tag << " expert " << e << " from rank " << s;
      }
      EXPECT_EQ(at, got.size()) << tag;
      // etp copies summed: exact up to the rounding of the sums.
      const std::vector<double> x_values = x.to_doubles(), summed = d.combine(plan, local).to_doubles();
      ASSERT_EQ(summed.size(), x_values.size()) << tag;
      for (size_t i = 0; i < summed.size(); ++i) EXPECT_NEAR(summed[i], etp * x_values[i], 1e-12 * etp * 1e5) << tag;
      const Tensor one_part = ps->etp_rank() == 0 ? local : Tensor::zeros(local.shape(), local.dtype());
      EXPECT_EQ(d.combine(plan, one_part).to_doubles(), x.to_doubles()) << tag;

      // <dispatch(a), b> = <a, combine(b)>, summed over the world.
      const Tensor a = random_like(x.size(0), 11 + uint64_t(world.rank()));
      const Tensor b = random_like(local.size(0), 31 + uint64_t(world.rank()));
      const double lhs = ps->world().all_reduce_scalar(dot(d.dispatch(plan, a), b));
      const double rhs = ps->world().all_reduce_scalar(dot(a, d.combine(plan, b)));
      EXPECT_NEAR(lhs, rhs, 1e-12 * std::abs(rhs)) << tag;
    }
}

TEST(TokenDispatcherMpi, EpNotDividingExpertsFailsOnEveryRank) {
  dist::World& world = dist::World::instance();
  auto ps = dist::ParallelState::create(world, {1, 1, 2, 0, 1});
  try {
    TokenDispatcher d(ps->ep(), ps->etp(), 3);
    FAIL() << "ep 2 with 3 experts was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend.parallel.ep = 2 does not divide the model's 3 experts"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace bb
