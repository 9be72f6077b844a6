// Lazily zeroed gradients (parameter.h): zero_grads in a deferring store
// marks gradients pending without touching them; grad_write_beta hands the
// first write an overwrite; grad_to_accumulate and settle_grads zero what is
// still pending and nothing else. A store that does not defer zeroes at once.
// (Through the runtime, on every model: tests/runtime/test_lazy_grad_zero.cpp.)
#include <gtest/gtest.h>

#include "bumblebee/primitive/modules/parameter.h"

namespace bb {
namespace {

std::vector<double> values(const Tensor& t) { return t.to_doubles(); }

// Three parameters of 2, 3 and 4 elements in one group on the CPU, every gradient element `fill`.
struct Store {
  ParamStore store;
  Parameter *a, *b, *c;
  explicit Store(bool defer) {
    a = &store.add("a", {2}, {});
    b = &store.add("b", {3}, {});
    c = &store.add("c", {4}, {});
    store.allocate(DType::F64, DType::F64, Device::cpu());
    if (defer) store.defer_zero_grads();
  }
  void fill(double v) { store.groups().front()->flat_grads().fill_(v); }
};

TEST(LazyGradZero, ZeroGradsOnlyMarksAndTheFirstWriteOverwrites) {
  Store s(true);
  s.fill(7.0);
  s.store.zero_grads();
  for (Parameter* p : {s.a, s.b, s.c}) {
    EXPECT_TRUE(p->grad_pending_zero) << p->name;
    EXPECT_EQ(values(p->grad), std::vector<double>(size_t(p->grad.numel()), 7.0)) << p->name << " was touched";
  }
  EXPECT_EQ(grad_write_beta(*s.a), 0.0);
  EXPECT_FALSE(s.a->grad_pending_zero);
  EXPECT_EQ(grad_write_beta(*s.a), 1.0) << "a second write must accumulate";
  EXPECT_EQ(values(grad_to_accumulate(*s.b)), std::vector<double>(3, 0.0));
  EXPECT_FALSE(s.b->grad_pending_zero);
}

TEST(LazyGradZero, ARunOfParametersOverwritesOnlyWhenAllArePending) {
  Store s(true);
  s.fill(7.0);
  s.store.zero_grads();
  EXPECT_EQ(grad_write_beta({s.a, s.b}), 0.0);
  EXPECT_FALSE(s.a->grad_pending_zero || s.b->grad_pending_zero);
  EXPECT_EQ(grad_write_beta({s.a, s.b}), 1.0);
  // Mixed: the pending one is zeroed so that one accumulating write is right for both.
  EXPECT_EQ(grad_write_beta({s.b, s.c}), 1.0);
  EXPECT_FALSE(s.c->grad_pending_zero);
  EXPECT_EQ(values(s.c->grad), std::vector<double>(4, 0.0));
  EXPECT_EQ(values(s.b->grad), std::vector<double>(3, 7.0)) << "b was written already; it must keep its sum";
  EXPECT_EQ(s.store.fused_grad_beta(*s.a, *s.b), 1.0);
}

TEST(LazyGradZero, SettleZeroesWhatIsPendingAndKeepsWhatWasWritten) {
  Store s(true);
  s.fill(7.0);
  s.store.zero_grads();
  grad_write_beta(*s.b);   // b now holds a written gradient (its 7s stand for one here)
  s.store.settle_grads();
  EXPECT_EQ(values(s.a->grad), std::vector<double>(2, 0.0));
  EXPECT_EQ(values(s.b->grad), std::vector<double>(3, 7.0));
  EXPECT_EQ(values(s.c->grad), std::vector<double>(4, 0.0));
  for (Parameter* p : {s.a, s.b, s.c}) EXPECT_FALSE(p->grad_pending_zero) << p->name;
  s.fill(5.0);
  s.store.settle_grads();   // nothing pending: nothing changes
  EXPECT_EQ(values(s.a->grad), std::vector<double>(2, 5.0));
}

TEST(LazyGradZero, AStoreThatDoesNotDeferZeroesAtOnce) {
  Store s(false);
  s.fill(7.0);
  s.store.zero_grads();
  for (Parameter* p : {s.a, s.b, s.c}) {
    EXPECT_FALSE(p->grad_pending_zero) << p->name;
    EXPECT_EQ(values(p->grad), std::vector<double>(size_t(p->grad.numel()), 0.0)) << p->name;
  }
  EXPECT_EQ(grad_write_beta(*s.a), 1.0);
}

}  // namespace
}  // namespace bb
