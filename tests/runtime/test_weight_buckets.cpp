// Runtime::export_weights in buckets (CPU): every bucket tensor equals the
// streamed export bit for bit for dtype none / float32 / bfloat16, buckets
// keep under bucket_bytes with their tensors aligned in one buffer, tensors
// kept from an earlier bucket survive later buckets and another export, and
// the device target on a CPU runtime is an error.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "bumblebee/runtime/runtime.h"

namespace bb {
namespace {

std::unique_ptr<Runtime> tiny_runtime() {
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/configs/qwen3-tiny";
  cfg.backend_cfg.load_hf_weights = false;
  return create_runtime(cfg);
}

// The streamed export (one tensor at a time), copied.
std::map<std::string, Tensor> streamed(Runtime& rt, ModelHandle& h) {
  std::map<std::string, Tensor> out;
  rt.export_weights(h, [&](const std::string& name, const Tensor& t) { out[name] = t.to(Device::cpu()).clone(); });
  return out;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(WeightBuckets, EveryTensorEqualsTheStreamedExportBitForBit) {
  auto rt = tiny_runtime();
  ModelHandle h = rt->build_model();
  const std::map<std::string, Tensor> want = streamed(*rt, h);
  for (const char* dtype : {"", "float32", "bfloat16"})
    for (uint64_t bucket_bytes : {uint64_t(1), uint64_t(4096), uint64_t(64) << 20}) {
      ExportOptions opts;
      opts.dtype = dtype;
      opts.bucket_bytes = bucket_bytes;
      size_t seen = 0;
      rt->export_weights(
          h,
          [&](const WeightBucket& bucket) {
            uint64_t bytes = 0;
            for (const auto& [name, t] : bucket) {
              const Tensor& w = want.at(name);
              EXPECT_TRUE(same_bytes(t, *dtype ? w.to(dtype_from_name(dtype)) : w)) << name << " " << dtype;
              // One buffer, each tensor 256-byte aligned after the first.
              const size_t offset = static_cast<const char*>(t.raw()) - static_cast<const char*>(bucket[0].second.raw());
              EXPECT_EQ(offset % 256, 0u) << name;
              bytes = offset + t.nbytes();
              ++seen;
            }
            EXPECT_TRUE(bucket.size() == 1 || bytes <= bucket_bytes) << bucket.size() << " tensors, " << bytes << " bytes";
          },
          opts);
      EXPECT_EQ(seen, want.size()) << dtype << " " << bucket_bytes;
    }
}

TEST(WeightBuckets, TensorsKeptFromAnEarlierBucketStayIntact) {
  auto rt = tiny_runtime();
  ModelHandle h = rt->build_model();
  const std::map<std::string, Tensor> want = streamed(*rt, h);
  ExportOptions opts;
  opts.bucket_bytes = 4096;
  std::vector<std::pair<std::string, Tensor>> kept;
  int buckets = 0;
  rt->export_weights(
      h,
      [&](const WeightBucket& bucket) {
        if (buckets++ % 3 == 0) kept.insert(kept.end(), bucket.begin(), bucket.end());
      },
      opts);
  rt->export_weights(h, [](const WeightBucket&) {}, opts);
  ASSERT_GT(buckets, 6);
  for (const auto& [name, t] : kept) EXPECT_TRUE(same_bytes(t, want.at(name))) << name;
}

TEST(WeightBuckets, TheDeviceTargetNeedsAGpuRuntime) {
  auto rt = tiny_runtime();
  ModelHandle h = rt->build_model();
  ExportOptions opts;
  opts.target = ExportTarget::Device;
  try {
    rt->export_weights(h, [](const WeightBucket&) {}, opts);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device target needs a GPU runtime"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bb
