// bb_mpi_tests entry point: bootstrap the World, run GoogleTest on every rank,
// print the report on rank 0 only (other ranks print just their failures),
// and exit non-zero on every rank when any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "bumblebee/distributed/world.h"

namespace {

// On ranks other than 0: one line per failed assertion, tagged with the rank.
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                 r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  bb::dist::World* world = nullptr;
  try {
    world = &bb::dist::World::instance();
  } catch (const bb::Error& e) {
    std::fprintf(stderr, "bb_mpi_tests: %s\n", e.what());
    return 1;
  }
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world->rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  const int local = RUN_ALL_TESTS();
  const double failed_ranks = world->comm().all_reduce_scalar(local != 0 ? 1.0 : 0.0);
  if (world->rank() == 0)
    std::printf("bb_mpi_tests on %d ranks: %s\n", world->size(),
                failed_ranks == 0 ? "every rank passed" : (std::to_string(int(failed_ranks)) + " rank(s) failed").c_str());
  return failed_ranks == 0 ? 0 : 1;
}
