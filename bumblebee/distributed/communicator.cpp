// The single-rank Communicator: every collective is the identity (or a copy),
// on host and CUDA tensors alike, so one-process runs need neither MPI nor NCCL.
// Also the Communicator's point-to-point wrappers and counts exchange, which
// every implementation shares.
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

std::unique_ptr<PendingCollective> Communicator::batch_isend_irecv(const std::vector<P2POp>&) {
  BB_FAIL("group ", name(), " does not carry point-to-point messages");
}

std::unique_ptr<PendingCollective> Communicator::isend(const Tensor& t, int peer) {
  return batch_isend_irecv({P2POp::send(t, peer)});
}

std::unique_ptr<PendingCollective> Communicator::irecv(Tensor& t, int peer) {
  return batch_isend_irecv({P2POp::recv(t, peer)});
}

void Communicator::send(const Tensor& t, int peer) { isend(t, peer)->wait(); }

void Communicator::recv(Tensor& t, int peer) { irecv(t, peer)->wait(); }

void Communicator::all_to_all(const Tensor&, const std::vector<int64_t>&, Tensor&, const std::vector<int64_t>&) {
  BB_FAIL("group ", name(), " does not carry all_to_all");
}

std::vector<int64_t> Communicator::all_to_all_counts(const std::vector<int64_t>& send_counts) {
  BB_CHECK(int64_t(send_counts.size()) == size(), "all_to_all_counts on group ", name(), " of size ", size(), ": ",
           send_counts.size(), " send_counts, expected ", size());
  const Tensor sent = Tensor::from_vector<int64_t>(send_counts, {int64_t(send_counts.size())});
  Tensor received = Tensor::zeros({int64_t(send_counts.size())}, DType::I64);
  const std::vector<int64_t> one_each(send_counts.size(), 1);
  all_to_all(sent, one_each, received, one_each);
  const int64_t* r = received.data<int64_t>();
  return std::vector<int64_t>(r, r + received.numel());
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

  // Every message is to this rank itself: the k-th send fills the k-th recv.
  std::unique_ptr<PendingCollective> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    check_p2p_ops(ops, 0, 1, name_);
    std::vector<const P2POp*> sends;
    for (const P2POp& op : ops)
      if (op.kind == P2POp::Kind::Send) sends.push_back(&op);
    size_t next_send = 0;
    for (const P2POp& op : ops) {
      if (op.kind != P2POp::Kind::Recv) continue;
      Tensor into = op.tensor;
      into.copy_from(sends[next_send++]->tensor);
    }
    return std::make_unique<CompletedCollective>();
  }

  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    check_all_to_all_args(in, send_counts, out, recv_counts, 0, 1, name_);
    out.copy_from(in);
  }

 private:
  std::string name_;
};

}  // namespace

std::shared_ptr<Communicator> make_single_rank_communicator(const std::string& name) {
  return std::make_shared<SingleRankCommunicator>(name);
}

}  // namespace bb::dist
