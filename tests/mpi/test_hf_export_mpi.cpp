// HF -> bumblebee -> HF under mpirun: every fixture loaded at several layouts
// (tp 2, pp 2, ep 2, dp 2 and mixes, as the world size allows) and written by
// the streaming export (small buckets, small shards) gives back every tensor
// of the source bit for bit, in its stored dtype; the tied embedding is
// written without lm_head.weight, generation_config.json is carried over; the
// fused-expert fixture's experts come back fused, as its source stores them.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "bumblebee/distributed/parallel_state.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

struct Layout {
  int tp = 1, pp = 1, ep = 1;
  std::string name() const {
    return "tp" + std::to_string(tp) + "_pp" + std::to_string(pp) + "_ep" + std::to_string(ep);
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void round_trip(const std::string& fixture, const Layout& l) {
  dist::Communicator& world = test::world_comm();
  if (world.size() % (l.tp * l.pp) != 0 || (world.size() / l.pp) % (l.tp * l.ep) != 0) return;   // not at this world size
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/" + fixture;
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.parallel.tp = l.tp;
  cfg.backend_cfg.parallel.pp = l.pp;
  cfg.backend_cfg.parallel.ep = l.ep;
  // The export needs no router loss; HF's form of it cannot be split over pipeline stages.
  if (fixture.rfind("qwen3_moe", 0) == 0) cfg.backend_cfg.model_overrides["output_router_logits"] = false;
  cfg.export_cfg.bucket_bytes = 4096;
  cfg.export_cfg.max_shard_bytes = 20000;
  const std::string out = test::launch_scratch("bb_hf_export_mpi", fixture + "_" + l.name());
  SCOPED_TRACE(fixture + " at " + l.name());
  {
    auto rt = create_runtime(cfg);
    ModelHandle h = rt->build_model();
    rt->save_hf_checkpoint(h, out);
  }
  world.barrier();
  if (world.rank() == 0) {
    const HFCheckpoint src = HFCheckpoint::open(cfg.hf_path), got = HFCheckpoint::open(out);
    size_t compared = 0;
    for (const std::string& name : got.names()) {
      ASSERT_TRUE(src.has(name)) << "export writes '" << name << "', which the source does not hold";
      EXPECT_TRUE(same_bytes(got.get(name), src.get(name))) << name;
      ++compared;
    }
    for (const std::string& name : src.names()) EXPECT_TRUE(got.has(name)) << "export lacks " << name;
    EXPECT_GT(compared, 0u);
    EXPECT_TRUE(fs::exists(out + "/config.json"));
    EXPECT_EQ(fs::exists(cfg.hf_path + "/generation_config.json"), fs::exists(out + "/generation_config.json"));
    EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json")) << "a 20 kB shard limit gives several shards";
    test::remove_launch_scratch(out);
  }
  world.barrier();
}

// Layouts each fixture allows: tp divides its heads (qwen3_mha_sharded has 3),
// ep its experts (qwen3_moe_mixed has 5).
TEST(HFExport, DenseRoundTripIsBitIdenticalAtEveryLayout) {
  for (const char* fixture : {"qwen3_gqa", "llama3_gqa", "llama3_tied_f16", "qwen3_tp"})
    for (const Layout& l : {Layout{2, 1, 1}, Layout{1, 2, 1}, Layout{2, 2, 1}}) round_trip(fixture, l);
  round_trip("qwen3_mha_sharded", Layout{1, 2, 1});
}

TEST(HFExport, MoeRoundTripIsBitIdenticalAtEveryLayout) {
  for (const char* fixture : {"qwen3_moe_experts", "qwen3_moe_fused"})
    for (const Layout& l : {Layout{1, 1, 2}, Layout{1, 2, 1}, Layout{1, 2, 2}}) round_trip(fixture, l);
  round_trip("qwen3_moe_mixed", Layout{1, 2, 1});
}

}  // namespace
}  // namespace bb
