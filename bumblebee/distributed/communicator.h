// Communicator: the collectives the parallel primitives use, over one group of ranks.
//
// Implementations: a single-rank group (every collective is the identity), MPI
// (host tensors; the CPU backend and bootstrap) and NCCL (CUDA tensors; created
// from a unique id broadcast over the matching MPI group). Collectives are
// blocking from the caller's view on CPU and stream-ordered on CUDA; the
// *_async forms return at once and complete in PendingCollective::wait().
// Gathers and scatters concatenate along dimension 0 in rank order.
#pragma once

#include <memory>
#include <string>

#include "bumblebee/core/tensor.h"

namespace bb::dist {

enum class ReduceOp { Sum, Max };

// A collective started without waiting. Until wait() returns, its input must
// not change and its output must not be read. wait() completes it: on the
// host the output is written when it returns; on CUDA the current stream is
// made to wait for it and the host does not block. test() lets the transfer
// progress (MPI moves data only inside MPI calls) and says whether it has
// arrived; wait() is still required before the tensors are used again.
// Destroying one without wait() drops the result.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;   // "tp", "dp", ... for error messages

  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;     // in place
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;              // out.size(0) == size * in.size(0)
  virtual void reduce_scatter(const Tensor& in, Tensor& out) = 0;          // in.size(0) == size * out.size(0), sum
  // reduce_scatter, started now, with the same result bit for bit. Collectives
  // of a group, async or not, must still be issued in the same order on every
  // rank. `in` and `out` must not overlap. This default runs the blocking form.
  virtual std::unique_ptr<PendingCollective> reduce_scatter_async(const Tensor& in, Tensor& out);
  virtual void broadcast(Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Agreement on a host value (used by checks so every rank fails together).
  virtual double all_reduce_scalar(double v, ReduceOp op = ReduceOp::Sum) = 0;
};

// A group of one rank: every collective is the identity.
std::shared_ptr<Communicator> make_single_rank_communicator(const std::string& name);

}  // namespace bb::dist
