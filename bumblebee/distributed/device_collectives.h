// DeviceCollectives: the tensor collectives of one group on CUDA tensors (NCCL).
//
// Plain C++ declarations; defined in communicator_nccl.cpp, which only NCCL
// builds compile. The MPI Communicator of a group owns one and hands it
// every CUDA tensor, so a single Communicator serves host and device tensors.
// Collectives are enqueued on the CUDA backend's current stream of the
// communicator's device and return without waiting, like the kernels around
// them. reduce_scatter_async and batch_isend_irecv run on the group's own
// communication stream instead, after the work queued so far on the current
// stream; later collectives of the group queue behind them, so the group's
// collectives keep their issue order. Barriers and scalar agreement stay on
// the host group. Arguments arrive checked (collective_checks.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bumblebee/distributed/communicator.h"

namespace bb::dist {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual int device() const = 0;
  virtual void all_reduce(Tensor& t, ReduceOp op) = 0;
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;
  virtual std::unique_ptr<PendingCollective> reduce_scatter_async(const Tensor& in, Tensor& out) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual std::unique_ptr<PendingCollective> batch_isend_irecv(const std::vector<P2POp>& ops) = 0;
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                          const std::vector<int64_t>& recv_counts) = 0;
};

// Collective over `host_group`: its rank 0 makes an ncclUniqueId and
// broadcasts it over the group, then every rank joins an NCCL communicator on
// CUDA device `device` with its rank in host_group. Sets NCCL_NVLS_ENABLE=0
// when the environment leaves it unset (NVLink multicast stays off).
std::unique_ptr<DeviceCollectives> make_nccl_collectives(Communicator& host_group, int device);

}  // namespace bb::dist
