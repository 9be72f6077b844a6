// Runtime::save_hf_checkpoint streams: exporting a model many times the
// export bucket (a tiny-hidden, 96-layer Qwen3 of ~71 MB on the CPU) raises
// the process's peak RSS (VmHWM, reset before the export) by about one
// tensor, not by the model; the output reloads bit for bit and is sharded
// under export.max_shard_bytes; bad sizes are errors naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

// A /proc/self/status field (VmHWM: peak RSS, VmRSS: RSS) in bytes.
uint64_t status_bytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}
uint64_t peak_rss() { return status_bytes("VmHWM"); }

// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return bool(f);
}

TEST(HFExport, PeakHostMemoryIsBoundedByOneTensorNotTheModel) {
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/configs/qwen3-tiny";
  cfg.backend_cfg.load_hf_weights = false;
  cfg.backend_cfg.model_overrides = {{"num_layers", 96}};
  cfg.export_cfg.bucket_bytes = 4u << 20;
  cfg.export_cfg.max_shard_bytes = 16u << 20;
  cfg.export_cfg.dtype = "param";
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  uint64_t model_bytes = 0;
  for (const Parameter& p : h.model().params().params()) model_bytes += p.value.nbytes();
  ASSERT_GE(model_bytes, 10 * cfg.export_cfg.bucket_bytes);

  const fs::path dir = fs::path(testing::TempDir()) / ("bb_hf_export_rss_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable";
  const uint64_t before = peak_rss();
  // The reset took: the peak is now the current RSS, not an earlier high.
  ASSERT_LE(before, status_bytes("VmRSS") + (1u << 20));
  rt->save_hf_checkpoint(h, dir.string());
  const uint64_t growth = peak_rss() - before;
  std::printf("export of a %.1f MB model: peak RSS grew by %.2f MB (bucket %.1f MB)\n", double(model_bytes) / 1e6,
              double(growth) / 1e6, double(cfg.export_cfg.bucket_bytes) / 1e6);
  EXPECT_LT(growth, cfg.export_cfg.bucket_bytes) << "the export held more than one bucket of the model in memory";

  const HFCheckpoint out = HFCheckpoint::open(dir.string());
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(out.has("lm_head.weight")) << "qwen3-tiny ties its embedding";
  for (const Parameter& p : h.model().params().params()) {
    if (p.name == "lm_head.weight") continue;
    const Tensor t = out.get(p.name);
    ASSERT_EQ(t.nbytes(), p.value.nbytes()) << p.name;
    EXPECT_EQ(std::memcmp(t.raw(), p.value.raw(), t.nbytes()), 0) << p.name;
  }
  fs::remove_all(dir);
}

TEST(HFExport, SizeKeysTakeHFSpellingsAndRejectOthers) {
  ConfigSchema s("t", "t");
  s.add_runtime_keys();
  EXPECT_EQ(s.parse({"export.max_shard_bytes=5GB"}).runtime.export_cfg.max_shard_bytes, 5'000'000'000ull);
  EXPECT_EQ(s.parse({"export.max_shard_bytes=20kB"}).runtime.export_cfg.max_shard_bytes, 20'000ull);
  EXPECT_EQ(s.parse({"export.bucket_bytes=2GiB"}).runtime.export_cfg.bucket_bytes, 2ull << 30);
  EXPECT_EQ(s.parse({"export.bucket_bytes=1048576"}).runtime.export_cfg.bucket_bytes, 1ull << 20);
  for (const char* bad : {"export.bucket_bytes=5XB", "export.bucket_bytes=big", "export.max_shard_bytes=0"}) {
    try {
      s.parse({bad});
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(bad).substr(0, std::string(bad).find('='))), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace bb
