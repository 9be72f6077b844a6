// NCCL collectives on CUDA tensors for one group, on the backend's current stream.
#include <nccl.h>

#include <cstdlib>
#include <cstring>

#include "bumblebee/core/error.h"
#include "bumblebee/dist/device_collectives.h"
#include "bumblebee/ops/cuda/cuda_context.h"

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
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess) ncclCommDestroy(comm_);
  }

  int device() const override { return device_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                             cuda::current_stream()),
               name_);
  }

  // NCCL takes the in-place forms (in == out's own rows) as they are.
  void all_gather(const Tensor& in, Tensor& out) override {
    cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclAllGather(in.raw(), out.raw(), size_t(in.numel()), nccl_type(in.dtype()), comm_,
                             cuda::current_stream()),
               name_);
  }

  void reduce_scatter(const Tensor& in, Tensor& out) override {
    cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), nccl_type(in.dtype()), ncclSum, comm_,
                                 cuda::current_stream()),
               name_);
  }

  void broadcast(Tensor& t, int root) override {
    cuda::DeviceGuard guard(device_);
    NCCL_CHECK(ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t.dtype()), root, comm_,
                             cuda::current_stream()),
               name_);
  }

 private:
  std::string name_;
  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& host_group, int device) {
  return std::make_unique<NcclCollectives>(host_group, device);
}

}  // namespace bb::dist
