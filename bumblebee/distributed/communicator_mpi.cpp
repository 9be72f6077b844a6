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
// it returns the blocking form's bits; only the calling thread touches MPI
// (MPI_THREAD_FUNNELED), and test() is what lets the transfer progress.
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
