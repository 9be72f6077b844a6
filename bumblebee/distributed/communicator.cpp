// The single-rank Communicator: every collective is the identity (or a copy),
// on host and CUDA tensors alike, so one-process runs need neither MPI nor NCCL.
#include "bumblebee/distributed/communicator.h"

#include "bumblebee/distributed/collective_checks.h"

namespace bb::dist {

namespace {

class CompletedCollective final : public PendingCollective {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::reduce_scatter_async(const Tensor& in, Tensor& out) {
  reduce_scatter(in, out);
  return std::make_unique<CompletedCollective>();
}

namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  explicit SingleRankCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return name_; }

  void all_reduce(Tensor& t, ReduceOp) override {
    BB_CHECK(t.defined(), "all_reduce on group ", name_, ": undefined tensor");
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    if (!check_all_gather_args(in, out, 0, 1, name_)) out.copy_from(in);
  }
  void reduce_scatter(const Tensor& in, Tensor& out) override {
    if (!check_reduce_scatter_args(in, out, 0, 1, name_)) out.copy_from(in);
  }
  void broadcast(Tensor& t, int root) override {
    BB_CHECK(t.defined(), "broadcast on group ", name_, ": undefined tensor");
    check_root(root, 1, name_);
  }
  void barrier() override {}
  double all_reduce_scalar(double v, ReduceOp) override { return v; }

 private:
  std::string name_;
};

}  // namespace

std::shared_ptr<Communicator> make_single_rank_communicator(const std::string& name) {
  return std::make_shared<SingleRankCommunicator>(name);
}

}  // namespace bb::dist
