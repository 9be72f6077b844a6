// The attention backend setting: the names it takes, and cudnn only where the build has it.
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

}  // namespace
}  // namespace bb
