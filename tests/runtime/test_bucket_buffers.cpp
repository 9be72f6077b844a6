// BucketBuffers: the two export buffers are taken in turn, reused only once no
// view of them is left, replaced (not overwritten) while one is, and grown
// when a bucket needs more room.
#include <gtest/gtest.h>

#include <cstring>

#include "bumblebee/runtime/bucket_buffers.h"

namespace bb {
namespace {

TEST(BucketBuffers, ReusesABufferOnceNothingViewsIt) {
  BucketBuffers buffers(Device::cpu(), Device::cpu());
  const char* first = buffers.next(1024)->data();
  buffers.next(1024);
  EXPECT_EQ(buffers.next(1024)->data(), first);
}

TEST(BucketBuffers, AViewKeptByTheCallerIsNeverOverwritten) {
  BucketBuffers buffers(Device::cpu(), Device::cpu());
  Tensor kept;
  {
    std::shared_ptr<BucketBuffer> b = buffers.next(1024);
    kept = bucket_view(b, 256, {4}, DType::F32);
    for (int i = 0; i < 4; ++i) kept.data<float>()[i] = float(i + 1);
  }
  buffers.next(1024);
  std::shared_ptr<BucketBuffer> again = buffers.next(1024);
  EXPECT_NE(again->data() + 256, static_cast<char*>(kept.raw()));
  std::memset(again->data(), 0, again->nbytes());
  EXPECT_EQ(kept.to_doubles(), (std::vector<double>{1, 2, 3, 4}));
}

TEST(BucketBuffers, GrowsForALargerBucket) {
  BucketBuffers buffers(Device::cpu(), Device::cpu());
  buffers.next(64);
  buffers.next(64);
  EXPECT_GE(buffers.next(4096)->nbytes(), 4096u);
}

TEST(BucketBuffers, AViewPastTheBufferIsAnError) {
  BucketBuffers buffers(Device::cpu(), Device::cpu());
  try {
    bucket_view(buffers.next(16), 8, {4}, DType::F32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overrun a bucket of 16 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
