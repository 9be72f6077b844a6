// The MPI Communicator: deterministic host collectives, NCCL for CUDA tensors.
//
// Reductions do not use MPI's reduction operators, whose summation order
// depends on the algorithm MPI picks (and may differ between all_reduce and
// reduce_scatter, or between ranks). Instead every rank receives the
// contributions of all ranks for the slice it owns (MPI_Alltoall[v]) and sums
// them in rank order; all_reduce then all-gathers the slices. So a sum is
// ((x_0 + x_1) + x_2) + ... bit for bit on every rank, and reduce_scatter
// returns exactly the rows of all_reduce that the rank owns. Data movement
// uses MPI datatypes of the element's width, so any dtype can be gathered or
// broadcast; reductions accept float64, float32, int32, int64 and uint8.
// reduce_scatter_async starts the same MPI_Ialltoall and sums in wait(), so
// it returns the blocking form's bits; one thread at a time touches MPI
// (MPI_THREAD_SERIALIZED), and test() is what lets the transfer progress.
//
// Point-to-point messages are MPI_Isend/MPI_Irecv with one tag, so MPI's
// non-overtaking rule gives the in-order matching communicator.h promises;
// wait() is MPI_Waitall and checks that each recv got as many elements as it
// expected. all_to_all is MPI_Alltoallv in elements of the row's width.
#include "bumblebee/distributed/communicator_mpi.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "bumblebee/distributed/collective_checks.h"
#include "bumblebee/distributed/device_collectives.h"

namespace bb::dist {

void check_mpi(int code, const char* call, const std::string& group) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  BB_FAIL(call, " on group ", group, " failed: ", std::string(text, size_t(len)));
}

namespace {

// An MPI datatype as wide as one element: reductions happen in our own code.
MPI_Datatype element_type(DType dt) {
  switch (dtype_size(dt)) {
    case 1: return MPI_UINT8_T;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    case 8: return MPI_UINT64_T;
  }
  BB_FAIL("no MPI datatype for ", dtype_name(dt));
}

template <typename T>
void accumulate(T* acc, const T* x, int64_t n, ReduceOp op) {
  if (op == ReduceOp::Sum)
    for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
  else
    for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
}

void check_host_reducible(DType dt, const std::string& group) {
  bool ok = dt == DType::F64 || dt == DType::F32 || dt == DType::I32 || dt == DType::I64 || dt == DType::U8;
  BB_CHECK(ok, "host reduction of ", dtype_name(dt), " on group ", group,
           " is not supported; reduce in float32 or float64 on the host, or in ", dtype_name(dt), " on CUDA");
}

// acc op= x over n elements of dtype dt (one of those check_host_reducible accepts).
void accumulate(void* acc, const void* x, int64_t n, DType dt, ReduceOp op) {
  switch (dt) {
    case DType::F64: return accumulate(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
    case DType::F32: return accumulate(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
    case DType::I32: return accumulate(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
    case DType::I64: return accumulate(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
    case DType::U8: return accumulate(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op);
    default: break;
  }
  BB_FAIL("host reduction of ", dtype_name(dt), " is not supported");
}

// Reduces `ranks` consecutive blocks of n elements, block 0 first, into dst.
void reduce_in_rank_order(const char* blocks, int ranks, int n, DType dt, ReduceOp op, void* dst) {
  if (n == 0) return;
  const size_t block_bytes = size_t(n) * dtype_size(dt);
  std::memcpy(dst, blocks, block_bytes);
  for (int j = 1; j < ranks; ++j) accumulate(dst, blocks + size_t(j) * block_bytes, n, dt, op);
}

// An MPI_Ialltoall of every rank's contribution to every slice; wait() sums this rank's slice.
class MpiPendingReduceScatter final : public PendingCollective {
 public:
  MpiPendingReduceScatter(const Tensor& in, Tensor& out, int ranks, MPI_Comm comm, std::string group)
      : out_(out), ranks_(ranks), contributions_(in.nbytes()), group_(std::move(group)) {
    MPI_Datatype type = element_type(in.dtype());
    const int n = int(out.numel());
    check_mpi(MPI_Ialltoall(in.raw(), n, type, contributions_.data(), n, type, comm, &request_), "MPI_Ialltoall",
              group_);
  }

  ~MpiPendingReduceScatter() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    // MPI may still be writing into contributions_: let it finish before they are freed.
    if (request_ != MPI_REQUEST_NULL && !finalised) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  bool test() override {
    int done = 0;
    check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test", group_);
    return done != 0;
  }

  void wait() override {
    check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait", group_);
    if (summed_) return;
    reduce_in_rank_order(contributions_.data(), ranks_, int(out_.numel()), out_.dtype(), ReduceOp::Sum, out_.raw());
    summed_ = true;
  }

 private:
  Tensor out_;
  int ranks_;
  std::vector<char> contributions_;
  std::string group_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool summed_ = false;
};

// Every point-to-point message carries this tag; matching is by order alone.
constexpr int kP2PTag = 0;

// The requests of one batch_isend_irecv; holds its tensors until they complete.
class MpiPendingP2P final : public PendingCollective {
 public:
  MpiPendingP2P(const std::vector<P2POp>& ops, MPI_Comm comm, std::string group)
      : ops_(ops), group_(std::move(group)) {
    requests_.reserve(ops_.size());
    statuses_.resize(ops_.size());
    for (const P2POp& op : ops_) {
      MPI_Datatype type = element_type(op.tensor.dtype());
      const int n = int(op.tensor.numel());
      MPI_Request r = MPI_REQUEST_NULL;
      if (op.kind == P2POp::Kind::Send)
        check_mpi(MPI_Isend(op.tensor.raw(), n, type, op.peer, kP2PTag, comm, &r), "MPI_Isend", group_);
      else
        check_mpi(MPI_Irecv(op.tensor.raw(), n, type, op.peer, kP2PTag, comm, &r), "MPI_Irecv", group_);
      requests_.push_back(r);
    }
  }

  ~MpiPendingP2P() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    // MPI may still be reading or writing the tensors: let it finish first.
    if (!finalised) MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  bool test() override {
    if (!completed_) {
      int done = 0;
      result_ = MPI_Testall(int(requests_.size()), requests_.data(), &done, statuses_.data());
      completed_ = done != 0 || result_ != MPI_SUCCESS;
      if (result_ != MPI_SUCCESS) check();
    }
    return completed_;
  }

  void wait() override {
    if (!completed_) {
      result_ = MPI_Waitall(int(requests_.size()), requests_.data(), statuses_.data());
      completed_ = true;
    }
    check();
  }

 private:
  std::vector<P2POp> ops_;
  std::string group_;
  std::vector<MPI_Request> requests_;
  // Filled by whichever of MPI_Testall / MPI_Waitall completes the batch.
  std::vector<MPI_Status> statuses_;
  int result_ = MPI_SUCCESS;
  bool completed_ = false, checked_ = false;

  // Once: each message's own error, each recv's element count, then the batch's result.
  void check() {
    if (checked_) return;
    checked_ = true;
    for (size_t i = 0; i < ops_.size(); ++i) {
      if (result_ == MPI_ERR_IN_STATUS) check_message(ops_[i], statuses_[i].MPI_ERROR);
      if (result_ == MPI_SUCCESS && ops_[i].kind == P2POp::Kind::Recv) check_received(ops_[i], statuses_[i]);
    }
    check_mpi(result_, "MPI_Waitall", group_);
  }

  std::string describe(const P2POp& op) const {
    return (op.kind == P2POp::Kind::Send ? "send to peer " : "recv from peer ") + std::to_string(op.peer) +
           " on group " + group_ + " (" + std::to_string(op.tensor.numel()) + " elements of " +
           dtype_name(op.tensor.dtype()) + ", shape " + shape_str(op.tensor.shape()) + ")";
  }

  void check_message(const P2POp& op, int error) const {
    if (error == MPI_SUCCESS || error == MPI_ERR_PENDING) return;
    int error_class = error;
    MPI_Error_class(error, &error_class);
    BB_CHECK(error_class != MPI_ERR_TRUNCATE, describe(op), ": the matching send is larger");
    check_mpi(error, op.kind == P2POp::Kind::Send ? "MPI_Isend" : "MPI_Irecv", group_);
  }

  void check_received(const P2POp& op, const MPI_Status& status) const {
    int received = 0;
    check_mpi(MPI_Get_count(&status, element_type(op.tensor.dtype()), &received), "MPI_Get_count", group_);
    BB_CHECK(received == op.tensor.numel(), describe(op), ": the matching send had ", received, " elements");
  }
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name) : comm_(comm), name_(std::move(name)) {
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", name_);
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", name_);
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", name_);
  }

  ~MpiCommunicator() override {
    device_.reset();
    int finalised = 0;
    MPI_Finalized(&finalised);
    // A communicator kept alive past MPI_Finalize (a static) has nothing left to free.
    if (comm_ != MPI_COMM_WORLD && !finalised) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    BB_CHECK(t.defined(), "all_reduce on group ", name_, ": undefined tensor");
    if (size_ == 1 || t.numel() == 0) return;
    if (t.device().is_cuda()) return device_for(t).all_reduce(t, op);
    const int64_t n = t.numel();
    check_count(n, "all_reduce");
    check_host_reducible(t.dtype(), name_);
    const size_t width = dtype_size(t.dtype());
    // Rank j owns elements [displs[j], displs[j] + counts[j]).
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int j = 0, offset = 0; j < size_; ++j) {
      counts[size_t(j)] = int(n / size_ + (j < n % size_ ? 1 : 0));
      displs[size_t(j)] = offset;
      offset += counts[size_t(j)];
    }
    const int mine = counts[size_t(rank_)];
    const size_t ranks = static_cast<size_t>(size_);
    std::vector<int> recv_counts(ranks, mine), recv_displs(ranks);
    for (int j = 0; j < size_; ++j) recv_displs[size_t(j)] = j * mine;
    std::vector<char> contributions(size_t(size_) * size_t(mine) * width);
    MPI_Datatype type = element_type(t.dtype());
    check_mpi(MPI_Alltoallv(t.raw(), counts.data(), displs.data(), type, contributions.data(), recv_counts.data(),
                            recv_displs.data(), type, comm_),
              "MPI_Alltoallv", name_);
    char* own = static_cast<char*>(t.raw()) + size_t(displs[size_t(rank_)]) * width;
    reduce_in_rank_order(contributions.data(), size_, mine, t.dtype(), op, own);
    check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t.raw(), counts.data(), displs.data(), type, comm_),
              "MPI_Allgatherv", name_);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    bool in_place = check_all_gather_args(in, out, rank_, size_, name_);
    if (size_ == 1) {
      if (!in_place) out.copy_from(in);
      return;
    }
    if (in.device().is_cuda()) return device_for(in).all_gather(in, out);
    check_count(in.numel(), "all_gather");
    MPI_Datatype type = element_type(in.dtype());
    const int n = int(in.numel());
    check_mpi(in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.raw(), n, type, comm_)
                       : MPI_Allgather(in.raw(), n, type, out.raw(), n, type, comm_),
              "MPI_Allgather", name_);
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    bool in_place = check_reduce_scatter_args(in, out, rank_, size_, name_);
    if (size_ == 1) {
      if (!in_place) out.copy_from(in);
      return;
    }
    if (in.device().is_cuda()) return device_for(in).reduce_scatter(in, out);
    check_count(in.numel(), "reduce_scatter");
    check_host_reducible(in.dtype(), name_);
    const int n = int(out.numel());
    std::vector<char> contributions(in.nbytes());
    MPI_Datatype type = element_type(in.dtype());
    // The whole input is read before `out` is written, so out may be in's own rows.
    check_mpi(MPI_Alltoall(in.raw(), n, type, contributions.data(), n, type, comm_), "MPI_Alltoall", name_);
    reduce_in_rank_order(contributions.data(), size_, n, in.dtype(), ReduceOp::Sum, out.raw());
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(const Tensor& in, Tensor& out) override {
    const bool in_place = check_reduce_scatter_args(in, out, rank_, size_, name_);
    BB_CHECK(!in_place, "reduce_scatter_async on group ", name_, ": out must not be in's own rows");
    if (size_ == 1) return Communicator::reduce_scatter_async(in, out);
    if (in.device().is_cuda()) return device_for(in).reduce_scatter_async(in, out);
    check_count(in.numel(), "reduce_scatter_async");
    check_host_reducible(in.dtype(), name_);
    return std::make_unique<MpiPendingReduceScatter>(in, out, size_, comm_, name_);
  }

  void broadcast(Tensor& t, int root) override {
    BB_CHECK(t.defined(), "broadcast on group ", name_, ": undefined tensor");
    check_root(root, size_, name_);
    if (size_ == 1 || t.numel() == 0) return;
    if (t.device().is_cuda()) return device_for(t).broadcast(t, root);
    check_count(t.numel(), "broadcast");
    check_mpi(MPI_Bcast(t.raw(), int(t.numel()), element_type(t.dtype()), root, comm_), "MPI_Bcast", name_);
  }

  void barrier() override { check_mpi(MPI_Barrier(comm_), "MPI_Barrier", name_); }

  std::unique_ptr<PendingCollective> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    const Device dev = check_p2p_ops(ops, rank_, size_, name_);
    if (dev.is_cuda()) return device_for(ops[0].tensor).batch_isend_irecv(ops);
    for (const P2POp& op : ops) check_count(op.tensor.numel(), "batch_isend_irecv");
    return std::make_unique<MpiPendingP2P>(ops, comm_, name_);
  }

  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    check_all_to_all_args(in, send_counts, out, recv_counts, rank_, size_, name_);
    if (in.device().is_cuda()) return device_for(in).all_to_all(in, send_counts, out, recv_counts);
    check_count(in.numel(), "all_to_all");
    check_count(out.numel(), "all_to_all");
    // Counts and displacements in elements; the whole tensors fit an int, so every part does.
    const int64_t row = row_numel(in);
    std::vector<int> sendcounts, sdispls, recvcounts, rdispls;
    for (int j = 0, s = 0, r = 0; j < size_; ++j) {
      sendcounts.push_back(int(send_counts[size_t(j)] * row));
      recvcounts.push_back(int(recv_counts[size_t(j)] * row));
      sdispls.push_back(s);
      rdispls.push_back(r);
      s += sendcounts.back();
      r += recvcounts.back();
    }
    MPI_Datatype type = element_type(in.dtype());
    check_mpi(MPI_Alltoallv(in.raw(), sendcounts.data(), sdispls.data(), type, out.raw(), recvcounts.data(),
                            rdispls.data(), type, comm_),
              "MPI_Alltoallv", name_);
  }

  double all_reduce_scalar(double v, ReduceOp op) override {
    Tensor t = Tensor::from_vector<double>({v}, {1});
    all_reduce(t, op);
    return t.data<double>()[0];
  }

 private:
  void check_count(int64_t n, const char* op) const {
    BB_CHECK(n <= INT_MAX, op, " on group ", name_, ": ", n, " elements exceed MPI's int count; split the tensor");
  }

  DeviceCollectives& device_for(const Tensor& t) {
#ifdef BB_WITH_NCCL
    if (!device_) device_ = make_nccl_collectives(*this, t.device().index);
    BB_CHECK(device_->device() == t.device().index, "collective on group ", name_, ": tensor is on ",
             t.device().str(), " but the group's NCCL communicator is on cuda:", device_->device(),
             "; each rank uses one GPU");
    return *device_;
#else
    BB_FAIL("collective on group ", name_, " got a tensor on ", t.device().str(),
            ", but this build has no NCCL; CUDA collectives need it (install NCCL and rebuild)");
#endif
  }

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<DeviceCollectives> device_;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const std::string& name) {
  return std::make_shared<MpiCommunicator>(comm, name);
}

}  // namespace bb::dist
