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

// On one rank every message is to itself: the k-th send fills the k-th recv.
TEST(SingleRankCommunicator, SelfMessagesPairUpInOrderWithinABatch) {
  auto c = bb::dist::make_single_rank_communicator("pp");
  using bb::dist::P2POp;
  Tensor first = Tensor::from_vector<float>({1, 2, 3}, {3});
  Tensor second = Tensor::from_vector<int64_t>({7, 8}, {1, 2});
  Tensor got_first = Tensor::zeros({3}, DType::F32), got_second = Tensor::zeros({1, 2}, DType::I64);
  auto pending = c->batch_isend_irecv({P2POp::send(first, 0), P2POp::recv(got_first, 0), P2POp::send(second, 0),
                                       P2POp::recv(got_second, 0)});
  EXPECT_TRUE(pending->test());
  pending->wait();
  EXPECT_EQ(got_first.to_doubles(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(got_second.to_doubles(), (std::vector<double>{7, 8}));
  c->batch_isend_irecv({})->wait();
}

TEST(SingleRankCommunicator, UnmatchedOrMismatchedSelfMessagesAreErrors) {
  auto c = bb::dist::make_single_rank_communicator("pp");
  using bb::dist::P2POp;
  Tensor t = Tensor::zeros({2, 3}, DType::F32);
  std::string e = error_message([&] { c->send(t, 0); });
  EXPECT_NE(e.find("batch_isend_irecv on group pp: rank 0 sends 1 message(s) to itself but receives 0"),
            std::string::npos)
      << e;
  e = error_message([&] { c->irecv(t, 0); });
  EXPECT_NE(e.find("rank 0 sends 0 message(s) to itself but receives 1"), std::string::npos) << e;
  e = error_message([&] { c->isend(t, 1); });
  EXPECT_NE(e.find("send to peer 1 on group pp: peer 1 is not a rank of a group of size 1"), std::string::npos) << e;
  Tensor f64 = Tensor::zeros({2, 3}, DType::F64);
  e = error_message([&] { c->batch_isend_irecv({P2POp::send(t, 0), P2POp::recv(f64, 0)}); });
  EXPECT_NE(e.find("message 0 of rank 0 to itself is float32 [2, 3] but its recv is float64 [2, 3]"),
            std::string::npos)
      << e;
  Tensor undefined;
  e = error_message([&] { c->batch_isend_irecv({P2POp::send(t, 0), P2POp::recv(undefined, 0)}); });
  EXPECT_NE(e.find("recv from peer 0 on group pp: undefined tensor"), std::string::npos) << e;
}

TEST(SingleRankCommunicator, AllToAllIsACopyAndCountsComeBack) {
  auto c = bb::dist::make_single_rank_communicator("ep");
  EXPECT_EQ(c->all_to_all_counts({3}), (std::vector<int64_t>{3}));
  Tensor in = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor out = Tensor::zeros({3, 2}, DType::F64);
  c->all_to_all(in, {3}, out, {3});
  EXPECT_EQ(out.to_doubles(), in.to_doubles());
  Tensor none = Tensor::zeros({0, 2}, DType::F64), none_out = Tensor::zeros({0, 2}, DType::F64);
  c->all_to_all(none, {0}, none_out, {0});
}

TEST(SingleRankCommunicator, AllToAllCountErrorsNameTheNumbers) {
  auto c = bb::dist::make_single_rank_communicator("ep");
  Tensor in = Tensor::zeros({3, 2}, DType::F32), out = Tensor::zeros({3, 2}, DType::F32);
  std::string e = error_message([&] { c->all_to_all(in, {2}, out, {3}); });
  EXPECT_NE(e.find("all_to_all on group ep: send_counts sum to 2 rows but in has 3 rows (shape [3, 2])"),
            std::string::npos)
      << e;
  e = error_message([&] { c->all_to_all(in, {3, 0}, out, {3}); });
  EXPECT_NE(e.find("all_to_all on group ep of size 1: 2 send_counts, expected 1"), std::string::npos) << e;
  Tensor f64 = Tensor::zeros({3, 2}, DType::F64);
  e = error_message([&] { c->all_to_all(in, {3}, f64, {3}); });
  EXPECT_NE(e.find("in is float32 but out is float64"), std::string::npos) << e;
  Tensor flat = Tensor::zeros({5, 2}, DType::F32);
  Tensor lower = flat.narrow(0, 3), upper = flat.narrow(2, 3);
  e = error_message([&] { c->all_to_all(lower, {3}, upper, {3}); });
  EXPECT_NE(e.find("all_to_all on group ep: in and out overlap"), std::string::npos) << e;
}
