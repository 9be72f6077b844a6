// The single-rank Communicator: identities, copies, and the shared argument checks.
#include "bumblebee/distributed/communicator.h"

#include <gtest/gtest.h>

#include <functional>

using bb::DType;
using bb::Tensor;

namespace {

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const bb::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SingleRankCommunicator, CollectivesAreIdentities) {
  auto c = bb::dist::make_single_rank_communicator("dp");
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->name(), "dp");
  Tensor t = Tensor::from_vector<double>({1.5, -2.0, 3.0}, {3});
  c->all_reduce(t);
  c->all_reduce(t, bb::dist::ReduceOp::Max);
  c->broadcast(t, 0);
  c->barrier();
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{1.5, -2.0, 3.0}));
  EXPECT_EQ(c->all_reduce_scalar(2.5), 2.5);

  Tensor gathered = Tensor::zeros({3}, DType::F64);
  c->all_gather(t, gathered);
  EXPECT_EQ(gathered.to_doubles(), t.to_doubles());
  Tensor scattered = Tensor::zeros({3}, DType::F64);
  c->reduce_scatter(t, scattered);
  EXPECT_EQ(scattered.to_doubles(), t.to_doubles());
}

TEST(SingleRankCommunicator, InPlaceFormsAreAccepted) {
  auto c = bb::dist::make_single_rank_communicator("dp");
  Tensor whole = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor own = whole.narrow(0, 2);
  c->all_gather(own, whole);
  c->reduce_scatter(whole, own);
  EXPECT_EQ(whole.to_doubles(), (std::vector<double>{1, 2, 3, 4}));
}

TEST(SingleRankCommunicator, BadArgumentsNameTheGroupAndShapes) {
  auto c = bb::dist::make_single_rank_communicator("tp");
  Tensor in = Tensor::zeros({2, 3}, DType::F32);
  Tensor wrong_rows = Tensor::zeros({3, 3}, DType::F32);
  std::string e = error_message([&] { c->all_gather(in, wrong_rows); });
  EXPECT_NE(e.find("all_gather on group tp of size 1: out has shape [3, 3], expected [2, 3]"), std::string::npos)
      << e;
  Tensor wrong_dtype = Tensor::zeros({2, 3}, DType::F64);
  e = error_message([&] { c->reduce_scatter(in, wrong_dtype); });
  EXPECT_NE(e.find("reduce_scatter on group tp: in is float32 but out is float64"), std::string::npos) << e;
  e = error_message([&] { c->broadcast(in, 1); });
  EXPECT_NE(e.find("broadcast on group tp: root 1 is not a rank of a group of size 1"), std::string::npos) << e;

  // Overlapping storage that is not the rank's own rows is refused.
  Tensor flat = Tensor::zeros({6}, DType::F32);
  Tensor whole = flat.narrow(0, 4);
  Tensor shifted = flat.narrow(1, 4);
  e = error_message([&] { c->all_gather(shifted, whole); });
  EXPECT_NE(e.find("overlap but in is not rank 0's own rows of out"), std::string::npos) << e;
  // Disjoint views of one buffer are fine.
  Tensor a = flat.narrow(0, 3), b = flat.narrow(3, 3);
  a.fill_(7.0);
  c->all_gather(a, b);
  EXPECT_EQ(flat.to_doubles(), (std::vector<double>{7, 7, 7, 7, 7, 7}));
}
