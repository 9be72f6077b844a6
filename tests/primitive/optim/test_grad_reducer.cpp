// GradReducer: a bucket's reduce-scatter starts when its last parameter is
// reported, the rest start in reduced_grads(), and invalidate() waits for
// what is in flight. A recording two-rank group stands in for dp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bumblebee/primitive/optim/grad_reducer.h"

namespace bb {
namespace {

// Rank 0 of two: reduce_scatter_async logs the bucket it starts and copies
// rank 0's half into `out` when waited for (a stand-in for the sum).
class RecordingGroup final : public dist::Communicator {
 public:
  struct Pending final : dist::PendingCollective {
    Pending(RecordingGroup* g, Tensor in, Tensor out) : group(g), in(std::move(in)), out(std::move(out)) {}
    bool test() override { return false; }
    void wait() override {
      out.copy_from(in.narrow(0, out.numel()));
      group->log.push_back("wait " + std::to_string(in.numel()));
    }
    RecordingGroup* group;
    Tensor in, out;
  };
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "dp"; }
  void all_reduce(Tensor&, dist::ReduceOp) override {}
  void all_gather(const Tensor&, Tensor&) override {}
  void reduce_scatter(const Tensor&, Tensor&) override {}
  void broadcast(Tensor&, int) override {}
  void barrier() override {}
  double all_reduce_scalar(double v, dist::ReduceOp) override { return v; }
  std::unique_ptr<dist::PendingCollective> reduce_scatter_async(const Tensor& in, Tensor& out) override {
    log.push_back("start " + std::to_string(in.numel()));
    return std::make_unique<Pending>(this, in, out);
  }
  std::vector<std::string> log;
};

// Parameters of 6, 4 and 2 elements, one bucket each (sizes 6, 4, 2: already even).
struct Fixture {
  Fixture() {
    store.add("first", {6}, {});
    store.add("middle", {4}, {});
    store.add("last", {2}, {});
    store.allocate(DType::F64, DType::F64, Device::cpu(), 2, 1);
    for (Parameter& p : store.params()) p.grad.fill_(double(p.group_index + 1));
  }
  ParamStore store;
  RecordingGroup dp;
};

TEST(GradReducer, StartsEachBucketWhenItsLastParameterIsReported) {
  Fixture f;
  GradReducer r(*f.store.groups().front(), f.dp);
  r.grad_ready(f.store.get("last"));
  EXPECT_EQ(f.dp.log, (std::vector<std::string>{"start 2"}));
  r.grad_ready(f.store.get("middle"));
  r.grad_ready(f.store.get("first"));
  r.check_all_reported();
  EXPECT_EQ(f.dp.log, (std::vector<std::string>{"start 2", "start 4", "start 6"}));
  // Rank 0's halves of each bucket, in buffer order: first[0:3], middle[0:2], last[0:1].
  EXPECT_EQ(r.reduced_grads().to_doubles(), (std::vector<double>{1, 1, 1, 2, 2, 3}));
  EXPECT_EQ(f.dp.log.size(), 6u);   // three waits, no further starts
}

TEST(GradReducer, ReducesUnreportedBucketsWhenTheStepAsks) {
  Fixture f;
  GradReducer r(*f.store.groups().front(), f.dp);
  r.grad_ready(f.store.get("last"));
  EXPECT_THROW(r.check_all_reported(), Error);
  EXPECT_EQ(r.reduced_grads().to_doubles(), (std::vector<double>{1, 1, 1, 2, 2, 3}));
  // The rest start in backward order, and all are waited for in that order.
  EXPECT_EQ(f.dp.log, (std::vector<std::string>{"start 2", "start 4", "start 6", "wait 2", "wait 4", "wait 6"}));
}

TEST(GradReducer, InvalidateWaitsForWhatIsInFlightAndRearms) {
  Fixture f;
  GradReducer r(*f.store.groups().front(), f.dp);
  r.grad_ready(f.store.get("last"));
  EXPECT_THROW(r.grad_ready(f.store.get("last")), Error);
  r.invalidate();
  EXPECT_EQ(f.dp.log, (std::vector<std::string>{"start 2", "wait 2"}));
  r.grad_ready(f.store.get("last"));   // re-armed: no longer a second report
  EXPECT_EQ(f.dp.log.back(), "start 2");
}

}  // namespace
}  // namespace bb
