// reduce_scatter_async on host tensors: several in flight at once, polled
// with test(), complete in any order to the blocking form's bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "bumblebee/distributed/world.h"

namespace {

using bb::DType;
using bb::Tensor;

// Not exact in any format, so the summation order shows in the bits.
Tensor inexact(int rank, int salt, int64_t n, DType dt) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(rank * 13.0 + salt * 3.0 + double(i)) * 1000.0 / 7.0;
  return Tensor::from_doubles(v, {n}, dt);
}

TEST(MpiReduceScatterAsync, ManyInFlightMatchTheBlockingFormBitForBit) {
  bb::dist::Communicator& c = bb::dist::World::instance().comm();
  const int64_t ranks = c.size();
  for (DType dt : {DType::F64, DType::F32}) {
    std::vector<Tensor> inputs, async_out, blocking_out;
    std::vector<std::unique_ptr<bb::dist::PendingCollective>> pending;
    for (int k = 0; k < 4; ++k) {
      const int64_t per_rank = 3 + k;
      inputs.push_back(inexact(c.rank(), k, per_rank * ranks, dt));
      async_out.push_back(Tensor::zeros({per_rank}, dt));
      pending.push_back(c.reduce_scatter_async(inputs.back(), async_out.back()));
      for (auto& p : pending) p->test();
    }
    for (int k = 3; k >= 0; --k) pending[size_t(k)]->wait();   // any order
    for (int k = 0; k < 4; ++k) {
      blocking_out.push_back(Tensor::zeros(async_out[size_t(k)].shape(), dt));
      c.reduce_scatter(inputs[size_t(k)], blocking_out.back());
      EXPECT_EQ(std::memcmp(async_out[size_t(k)].raw(), blocking_out.back().raw(), blocking_out.back().nbytes()), 0)
          << bb::dtype_name(dt) << " collective " << k;
    }
  }
}

TEST(MpiReduceScatterAsync, OutputInsideTheInputIsAnError) {
  bb::dist::Communicator& c = bb::dist::World::instance().comm();
  Tensor in = Tensor::zeros({2 * c.size()}, DType::F64);
  Tensor own = in.narrow(2 * c.rank(), 2);
  EXPECT_THROW(c.reduce_scatter_async(in, own), bb::Error);
}

}  // namespace
