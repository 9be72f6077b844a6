// NCCL collectives on CUDA tensors for one group, on the backend's current
// stream; async reduce-scatters and point-to-point batches on the group's own
// communication stream.
//
// Point-to-point batches and all_to_all are ncclSend/ncclRecv inside one
// ncclGroupStart/End, so every message of the call is posted together (no
// deadlock between a rank's send and its recv) and NCCL matches the messages
// of a pair of ranks in issue order. They move bytes, so any dtype travels.
// Empty messages are not posted: both sides skip them alike.
//
// Ordering: an async collective waits (cudaStreamWaitEvent, no host sync) for
// everything queued on the current stream when it starts, and every later
// collective of the group, on whichever stream, waits for the last async one.
// So the group's collectives run in issue order, as NCCL requires of one
// communicator, while the compute stream runs on in between.
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "bumblebee/core/error.h"
#include "bumblebee/distributed/collective_checks.h"
#include "bumblebee/distributed/device_collectives.h"
#include "bumblebee/core/cuda/cuda_context.h"
#include "bumblebee/ops/op_profile.h"

#define NCCL_CHECK(call, group)                                                                        \
  do {                                                                                                 \
    ncclResult_t bb_nccl_res_ = (call);                                                                \
    if (bb_nccl_res_ != ncclSuccess)                                                                   \
      BB_FAIL("NCCL call ", #call, " on group ", group, " failed: ", ncclGetErrorString(bb_nccl_res_)); \
  } while (0)

namespace bb::dist {

namespace {

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::F64: return ncclFloat64;
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
  }
  BB_FAIL("no NCCL datatype for ", dtype_name(dt));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Sum ? ncclSum : ncclMax; }

// True while the CUDA runtime is usable; at process exit it may already be gone.
bool cuda_alive() {
  int current = 0;
  return cudaGetDevice(&current) == cudaSuccess;
}

cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

// Runs `enqueue` between ncclGroupStart and ncclGroupEnd, closing the group
// even when it throws.
template <typename F>
void nccl_group(const std::string& group, F&& enqueue) {
  NCCL_CHECK(ncclGroupStart(), group);
  try {
    enqueue();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  NCCL_CHECK(ncclGroupEnd(), group);
}

// Completes by making the waiting thread's current stream wait for `done`.
// Holds the tensors the transfer uses: a temporary the caller lets go would
// otherwise return to the memory pool, whose reuse is ordered on the current
// stream only, while the communication stream still reads or writes it.
class NcclPendingCollective final : public PendingCollective {
 public:
  NcclPendingCollective(int device, cudaEvent_t done, std::vector<Tensor> in_use)
      : device_(device), done_(done), in_use_(std::move(in_use)) {}
  ~NcclPendingCollective() override {
    if (!cuda_alive()) return;
    // Dropped without wait(): the tensors go back to the pool only behind the transfer.
    if (!waited_) {
      cuda::DeviceGuard guard(device_);
      cudaStreamWaitEvent(cuda::current_stream(), done_, 0);
    }
    // Destroying an event that work still has to record is allowed: CUDA frees it afterwards.
    cudaEventDestroy(done_);
  }
  bool test() override {
    cuda::DeviceGuard guard(device_);
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
    return true;
  }
  void wait() override {
    cuda::DeviceGuard guard(device_);
    CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), done_, 0));
    waited_ = true;
  }

 private:
  int device_;
  cudaEvent_t done_;
  std::vector<Tensor> in_use_;
  bool waited_ = false;
};

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(Communicator& host_group, int device) : name_(host_group.name()), device_(device) {
    // NVLink multicast (NVLS) reserves large buffers and has hung on shared
    // machines; keep it off unless the user asked for it.
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    // Byte 0 says whether rank 0 got an id, so a failure there fails every
    // rank instead of leaving them waiting in ncclCommInitRank.
    Tensor message = Tensor::zeros({int64_t(1 + sizeof(ncclUniqueId))}, DType::U8);
    ncclUniqueId id;
    if (host_group.rank() == 0) {
      ncclResult_t res = ncclGetUniqueId(&id);
      message.data<uint8_t>()[0] = res == ncclSuccess ? 1 : 0;
      std::memcpy(message.data<uint8_t>() + 1, &id, sizeof(id));
    }
    host_group.broadcast(message, 0);
    BB_CHECK(message.data<uint8_t>()[0] == 1, "group ", name_, ": rank 0 could not create an NCCL unique id");
    std::memcpy(&id, message.data<uint8_t>() + 1, sizeof(id));
    cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclCommInitRank(&comm_, host_group.size(), id, host_group.rank()), name_);
  }

  ~NcclCollectives() override {
    // At process exit the CUDA runtime may already be gone; then the process
    // ends anyway and destroying the communicator would only fault.
    if (!cuda_alive()) return;
    ncclCommDestroy(comm_);
    if (comm_stream_) {
      cudaEventDestroy(inputs_ready_);
      cudaEventDestroy(async_tail_);
      cudaStreamDestroy(comm_stream_);
    }
  }

  int device() const override { return device_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    cuda::DeviceGuard guard(device_);
    after_async_collectives();
    ops::profile::Scope timed(Device::cuda(device_), profile_label("all_reduce"));
    NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                             cuda::current_stream()),
               name_);
  }

  // NCCL takes the in-place forms (in == out's own rows) as they are.
  void all_gather(const Tensor& in, Tensor& out) override {
    cuda::DeviceGuard guard(device_);
    after_async_collectives();
    ops::profile::Scope timed(Device::cuda(device_), profile_label("all_gather"));
    NCCL_CHECK(ncclAllGather(in.raw(), out.raw(), size_t(in.numel()), nccl_type(in.dtype()), comm_,
                             cuda::current_stream()),
               name_);
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    cuda::DeviceGuard guard(device_);
    after_async_collectives();
    ops::profile::Scope timed(Device::cuda(device_), profile_label("reduce_scatter"));
    NCCL_CHECK(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), nccl_type(in.dtype()), ncclSum, comm_,
                                 cuda::current_stream()),
               name_);
  }

  void broadcast(Tensor& t, int root) override {
    cuda::DeviceGuard guard(device_);
    after_async_collectives();
    ops::profile::Scope timed(Device::cuda(device_), profile_label("broadcast"));
    NCCL_CHECK(ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_,
                             cuda::current_stream()),
               name_);
  }

  std::unique_ptr<PendingCollective> reduce_scatter_async(const Tensor& in, Tensor& out) override {
    return on_comm_stream("reduce_scatter_async", {in, out}, [&](cudaStream_t stream) {
      NCCL_CHECK(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), nccl_type(in.dtype()), ncclSum,
                                   comm_, stream),
                 name_);
    });
  }

  std::unique_ptr<PendingCollective> batch_isend_irecv(const std::vector<P2POp>& ops) override {
    std::vector<Tensor> in_use;
    for (const P2POp& op : ops) in_use.push_back(op.tensor);
    return on_comm_stream("send_recv", std::move(in_use), [&](cudaStream_t stream) {
      nccl_group(name_, [&] {
        for (const P2POp& op : ops) {
          if (op.tensor.nbytes() == 0) continue;
          if (op.kind == P2POp::Kind::Send)
            NCCL_CHECK(ncclSend(op.tensor.raw(), op.tensor.nbytes(), ncclUint8, op.peer, comm_, stream), name_);
          else
            NCCL_CHECK(ncclRecv(op.tensor.raw(), op.tensor.nbytes(), ncclUint8, op.peer, comm_, stream), name_);
        }
      });
    });
  }

  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts) override {
    cuda::DeviceGuard guard(device_);
    after_async_collectives();
    ops::profile::Scope timed(Device::cuda(device_), profile_label("all_to_all"));
    const size_t row_bytes = size_t(row_numel(in)) * dtype_size(in.dtype());
    const char* sent = static_cast<const char*>(in.raw());
    char* received = static_cast<char*>(out.raw());
    const cudaStream_t stream = cuda::current_stream();
    nccl_group(name_, [&] {
      for (size_t j = 0; j < send_counts.size(); ++j) {
        const size_t send_bytes = size_t(send_counts[j]) * row_bytes, recv_bytes = size_t(recv_counts[j]) * row_bytes;
        if (send_bytes) NCCL_CHECK(ncclSend(sent, send_bytes, ncclUint8, int(j), comm_, stream), name_);
        if (recv_bytes) NCCL_CHECK(ncclRecv(received, recv_bytes, ncclUint8, int(j), comm_, stream), name_);
        sent += send_bytes;
        received += recv_bytes;
      }
    });
  }

 private:
  std::string profile_label(const char* collective) const {
    return ops::profile::enabled() ? "nccl " + std::string(collective) + " [" + name_ + "]" : std::string();
  }

  // Enqueues a collective on the group's communication stream, after the work
  // queued so far on the current stream, and returns its completion, which
  // holds the tensors it uses.
  template <typename F>
  std::unique_ptr<PendingCollective> on_comm_stream(const char* collective, std::vector<Tensor> in_use,
                                                    F&& enqueue) {
    cuda::DeviceGuard guard(device_);
    if (!comm_stream_) {
      CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
      inputs_ready_ = make_event();
      async_tail_ = make_event();
    }
    // The inputs were written by work queued on the current stream so far.
    CUDA_CHECK(cudaEventRecord(inputs_ready_, cuda::current_stream()));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, inputs_ready_, 0));
    {
      // The profile times it on the stream it runs on.
      const cudaStream_t compute = cuda::current_stream();
      cuda::set_current_stream(comm_stream_);
      try {
        ops::profile::Scope timed(Device::cuda(device_), profile_label(collective));
        enqueue(comm_stream_);
      } catch (...) {
        cuda::set_current_stream(compute);
        throw;
      }
      cuda::set_current_stream(compute);
    }
    cudaEvent_t done = make_event();
    CUDA_CHECK(cudaEventRecord(done, comm_stream_));
    CUDA_CHECK(cudaEventRecord(async_tail_, comm_stream_));
    return std::make_unique<NcclPendingCollective>(device_, done, std::move(in_use));
  }

  // Queues the current stream behind the group's async collectives so far.
  void after_async_collectives() {
    if (comm_stream_) CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(), async_tail_, 0));
  }

  std::string name_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;   // created by the first async collective
  cudaEvent_t inputs_ready_ = nullptr, async_tail_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& host_group, int device) {
  return std::make_unique<NcclCollectives>(host_group, device);
}

}  // namespace bb::dist
