// Communicator: the collectives the parallel primitives use, over one group of ranks.
//
// Implementations: a single-rank group (every collective is the identity), MPI
// (host tensors; the CPU backend and bootstrap) and NCCL (CUDA tensors; created
// from a unique id broadcast over the matching MPI group). Collectives are
// blocking from the caller's view on CPU and stream-ordered on CUDA; the
// *_async forms return at once and complete in PendingCollective::wait().
// Gathers and scatters concatenate along dimension 0 in rank order.
//
// Point-to-point messages (send, recv, batch_isend_irecv) name their peer by
// its rank in this group, not in the world. Messages of one group between one
// pair of ranks match in issue order: the k-th send from a to b fills the k-th
// recv of b from a, which must have the same size and dtype. There are no
// tags. A send and a recv that each wait on the other (two ranks sending to
// each other, a pipeline stage exchanging with both neighbours) must be posted
// in one batch_isend_irecv, which starts all of its messages together; so must
// a message to this rank itself, which the batch's recv from itself receives.
// On CUDA a group's NCCL operations, collectives and batches alike, run one
// after another in issue order, so the ranks that exchange messages must
// issue their collectives and batches of that group in matching orders.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// One message of a batched exchange: send `tensor` to `peer`, or receive into
// it from `peer`. The tensor shares storage with the caller's, so a recv
// writes into the caller's buffer.
struct P2POp {
  enum class Kind { Send, Recv };
  static P2POp send(const Tensor& t, int peer) { return {Kind::Send, t, peer}; }
  static P2POp recv(Tensor& t, int peer) { return {Kind::Recv, t, peer}; }
  Kind kind;
  Tensor tensor;
  int peer;
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

  // Starts every send and recv of `ops` together (MPI_Isend/MPI_Irecv, or
  // one NCCL group on the group's communication stream) and returns one
  // handle for all of them. All tensors are on one device. This default, for
  // groups that carry no point-to-point traffic, throws.
  virtual std::unique_ptr<PendingCollective> batch_isend_irecv(const std::vector<P2POp>& ops);
  std::unique_ptr<PendingCollective> isend(const Tensor& t, int peer);
  std::unique_ptr<PendingCollective> irecv(Tensor& t, int peer);
  void send(const Tensor& t, int peer);   // isend(t, peer)->wait()
  void recv(Tensor& t, int peer);         // irecv(t, peer)->wait()

  // MPI_Alltoallv over dim-0 rows (rows of any trailing shape): the first
  // send_counts[0] rows of `in` go to rank 0, the next send_counts[1] to
  // rank 1, ...; `out` holds recv_counts[0] rows from rank 0, then
  // recv_counts[1] from rank 1, ... Counts sum to in.size(0) and out.size(0),
  // may be zero, and agree across ranks (send_counts[j] on rank i equals
  // recv_counts[i] on rank j: all_to_all_counts gives exactly that). `in` and
  // `out` must not overlap. This default, for groups without it, throws.
  virtual void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                          const std::vector<int64_t>& recv_counts);
  // Every rank's send_counts[me], in rank order: the recv_counts of the
  // all_to_all that sends send_counts (an all_to_all of one int64 per rank,
  // over the host), so the caller can size `out` first.
  std::vector<int64_t> all_to_all_counts(const std::vector<int64_t>& send_counts);
};

// A group of one rank: every collective is the identity.
std::shared_ptr<Communicator> make_single_rank_communicator(const std::string& name);

}  // namespace bb::dist
