// The attention backend setting: the names it takes, cudnn only where the
// build has it, and what auto resolves to for one call.
#include "bumblebee/ops/attention_backend.h"

#include <gtest/gtest.h>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

using ops::AttentionBackend;

TEST(AttentionBackend, TakesAutoFlashAndCudnnWhereBuilt) {
  EXPECT_EQ(ops::attention_backend_from_name("auto"), AttentionBackend::Auto);
  EXPECT_EQ(ops::attention_backend_from_name("flash"), AttentionBackend::Flash);
#if defined(BB_WITH_CUDA) && !defined(BB_WITH_CUDNN)
  EXPECT_THROW(ops::attention_backend_from_name("cudnn"), Error);
#else
  EXPECT_EQ(ops::attention_backend_from_name("cudnn"), AttentionBackend::Cudnn);
#endif
  try {
    ops::attention_backend_from_name("triton");
    ADD_FAILURE() << "triton accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'triton' is not known (expected auto, cudnn or flash)"), std::string::npos)
        << e.what();
  }
}

TEST(AttentionBackend, SetAndReadBack) {
  ops::set_attention_backend("flash");
  EXPECT_EQ(ops::attention_backend(), AttentionBackend::Flash);
  EXPECT_THROW(ops::set_attention_backend("bogus"), Error);
  EXPECT_EQ(ops::attention_backend(), AttentionBackend::Flash);   // a rejected name changes nothing
  ops::set_attention_backend("auto");
  EXPECT_EQ(ops::attention_backend(), AttentionBackend::Auto);
}

ops::AttentionCall hopper_call(bool backward, int64_t head_dim_qk, int64_t head_dim_v) {
  ops::AttentionCall call;
  call.backward = backward;
  call.head_dim_qk = head_dim_qk;
  call.head_dim_v = head_dim_v;
  call.hopper_kernel = true;
  call.cudnn_built = true;
  return call;
}

TEST(AttentionBackend, AutoTakesOurHopperKernelsWhereTheyLead) {
  for (int64_t d : {64, 128}) {
    EXPECT_EQ(ops::auto_attention_backend(hopper_call(false, d, d)), AttentionBackend::Flash) << d;
    EXPECT_EQ(ops::auto_attention_backend(hopper_call(true, d, d)), AttentionBackend::Flash) << d;
  }
  EXPECT_EQ(ops::auto_attention_backend(hopper_call(false, 192, 128)), AttentionBackend::Flash);
  EXPECT_EQ(ops::auto_attention_backend(hopper_call(true, 192, 128)), AttentionBackend::Cudnn);
}

TEST(AttentionBackend, AutoTakesCudnnWithoutOurHopperKernelOrForADeterministicBackward) {
  ops::AttentionCall other_gpu = hopper_call(false, 128, 128);
  other_gpu.hopper_kernel = false;
  EXPECT_EQ(ops::auto_attention_backend(other_gpu), AttentionBackend::Cudnn);
  other_gpu.backward = true;
  EXPECT_EQ(ops::auto_attention_backend(other_gpu), AttentionBackend::Cudnn);

  ops::AttentionCall deterministic = hopper_call(true, 128, 128);
  deterministic.deterministic = true;
  EXPECT_EQ(ops::auto_attention_backend(deterministic), AttentionBackend::Cudnn);
  deterministic.backward = false;  // the forward has no atomics
  EXPECT_EQ(ops::auto_attention_backend(deterministic), AttentionBackend::Flash);
}

TEST(AttentionBackend, AutoTakesFlashWithoutCudnn) {
  for (bool backward : {false, true})
    for (bool hopper : {false, true}) {
      ops::AttentionCall call = hopper_call(backward, 192, 128);
      call.hopper_kernel = hopper;
      call.deterministic = true;
      call.cudnn_built = false;
      EXPECT_EQ(ops::auto_attention_backend(call), AttentionBackend::Flash) << backward << hopper;
    }
}

}  // namespace
}  // namespace bb
