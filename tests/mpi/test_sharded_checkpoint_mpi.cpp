// Sharded training checkpoints under mpirun: at pure tp (qwen3_tp at
// tp = world) and pure ep (qwen3_moe_experts with 8 experts at ep = world)
// every piece in a rank's file lies inside that rank's own shard of its
// tensor, split tensors have one piece per rank and their bytes are 1/world
// in each file (at pure tp the whole files too); and the peak host RSS (VmHWM, reset before)
// that a save and a load of a 96-layer tiny-hidden Qwen3 add per rank is
// printed and bounded: the save by one tensor plus the metadata (nothing is
// gathered), the load by the rank's own shard plus one tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/runtime/sharded_state.h"
#include "tests/mpi/mpi_test_support.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

std::string scratch(const std::string& name) { return test::launch_scratch("bb_sharded_ckpt_mpi", name); }

// The HF tensor a piece belongs to ("exp_avg/model.norm.weight" -> "model.norm.weight").
std::string param_name(const std::string& key) { return key.substr(key.find('/') + 1); }

bool inside(const TensorBox& piece, const TensorBox& shard) { return box_intersection(piece, shard) == piece; }

// Every piece in this rank's file is part of this rank's own shard of its parameter.
void expect_own_pieces_only(ModelState& st, const std::string& state_dir) {
  const int rank = test::world_comm().rank();
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d.safetensors", rank);
  const fs::path file = fs::path(state_dir) / name;
  if (!fs::exists(file)) return;
  const SafetensorsFile f = SafetensorsFile::open(file.string());
  const ShardedCheckpoint ck = ShardedCheckpoint::open(state_dir);
  for (const std::string& piece : f.names()) {
    const std::string key = piece.substr(0, piece.find('@'));
    const Parameter* p = nullptr;
    for (auto& chunk : st.chunks)
      if (!p) p = chunk->params().find(param_name(key));
    ASSERT_NE(p, nullptr) << "rank " << rank << " wrote '" << piece << "' of a parameter it does not hold";
    Shape offsets;
    for (size_t at = piece.find('@') + 1; at <= piece.size();) {
      const size_t comma = std::min(piece.find(',', at), piece.size());
      if (comma > at) offsets.push_back(std::stoll(piece.substr(at, comma - at)));
      at = comma + 1;
    }
    const TensorBox box{offsets, f.shape(piece)};
    EXPECT_TRUE(inside(box, parameter_box(*p))) << "rank " << rank << " wrote " << piece << " " << box_str(box)
                                                << ", outside its shard " << box_str(parameter_box(*p));
    EXPECT_TRUE(ck.has(key)) << key;
  }
}

// Rank 0: split tensors (keys containing `split_marker`) have one piece per
// rank, each in its own file, and their bytes are spread evenly over the
// files; with `whole_files` the files themselves are within 40% of an even
// share (at pure ep the dense parameters, dp replicas there, are rank 0's).
void expect_even_files(const std::string& state_dir, int world, const std::string& split_marker, bool whole_files) {
  const ShardedCheckpoint ck = ShardedCheckpoint::open(state_dir);
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(state_dir + "/" + kShardedMetadataFile));
  std::map<std::string, uint64_t> split_bytes;
  uint64_t split_total = 0;
  for (const auto& [key, t] : m.at("tensors").items()) {
    if (key.find(split_marker) == std::string::npos) continue;
    std::set<std::string> files;
    for (const auto& s : t.at("shards")) {
      files.insert(s.at("file").get<std::string>());
      const uint64_t bytes = uint64_t(shape_numel(s.at("extent").get<Shape>())) * dtype_size(ck.dtype(key));
      split_bytes[s.at("file").get<std::string>()] += bytes;
      split_total += bytes;
    }
    if (key.starts_with("model/")) EXPECT_EQ(files.size(), t.at("shards").size()) << key << ": two pieces in one file";
  }
  EXPECT_GT(split_total, 0u) << "no tensor matched '" << split_marker << "'";
  ASSERT_EQ(ck.files().size(), size_t(world)) << "every rank holds a shard of its own";
  uint64_t total = 0;
  for (const auto& [file, sum] : ck.files()) total += sum.bytes;
  for (const auto& [file, sum] : ck.files()) {
    const double share = double(sum.bytes) / double(total) * world;
    const double split_share = double(split_bytes[file]) / double(split_total) * world;
    std::printf("%s: %.1f kB, %.2f of an even share (%s tensors: %.3f)\n", file.c_str(), double(sum.bytes) / 1e3,
                share, split_marker.c_str(), split_share);
    EXPECT_NEAR(split_share, 1.0, 0.01) << file;
    if (!whole_files) continue;
    EXPECT_GT(share, 0.6) << file;
    EXPECT_LT(share, 1.4) << file;
  }
}

void check_layout(RuntimeConfig cfg, const std::string& name, const std::string& split_marker, bool whole_files) {
  dist::Communicator& world = test::world_comm();
  const std::string dir = scratch(name);
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  rt->save_checkpoint(h, dir);
  expect_own_pieces_only(h.state(), dir + "/state");
  if (world.rank() == 0) expect_even_files(dir + "/state", world.size(), split_marker, whole_files);
  world.barrier();
  if (world.rank() == 0) test::remove_launch_scratch(dir);
}

TEST(ShardedCheckpointMPI, PureTensorParallelRanksWriteOnlyTheirOwnShards) {
  const int n = test::world_comm().size();
  if (n != 2 && n != 4) GTEST_SKIP() << "qwen3_tp splits over tp 2 or 4";
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_tp";
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.parallel.tp = n;
  check_layout(cfg, "tp", "_proj.weight", true);
}

TEST(ShardedCheckpointMPI, PureExpertParallelRanksWriteOnlyTheirOwnExperts) {
  const int n = test::world_comm().size();
  if (8 % n != 0) GTEST_SKIP() << "8 experts over ep = " << n;
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_moe_experts";
  cfg.backend_cfg.dtype = "float64";
  cfg.backend_cfg.load_hf_weights = false;
  cfg.backend_cfg.model_overrides = {{"num_experts", 8}, {"output_router_logits", false}};
  cfg.backend_cfg.parallel.ep = n;
  check_layout(cfg, "ep", ".mlp.experts.", false);
}

// A /proc/self/status field (VmHWM: peak RSS, VmRSS: RSS) in bytes.
uint64_t status_bytes(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  return 0;
}

// Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return bool(f);
}

TEST(ShardedCheckpointMPI, PeakHostMemoryOfSaveAndLoadIsTheRanksOwnShardPlusOneTensor) {
  dist::Communicator& world = test::world_comm();
  RuntimeConfig cfg;
  cfg.hf_path = std::string(BB_SOURCE_DIR) + "/configs/qwen3-tiny";
  cfg.backend_cfg.load_hf_weights = false;
  cfg.backend_cfg.model_overrides = {{"num_layers", 96}};
  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  uint64_t model_bytes = 0, largest = 0, own = 0;
  for (const Parameter& p : h.model().params().params()) {
    model_bytes += p.value.nbytes();
    largest = std::max<uint64_t>(largest, p.value.nbytes());
  }
  for (const TensorPiece& piece : training_state_pieces(h.state(), PieceUse::Load)) own += piece.data.nbytes();
  const std::string dir = scratch("rss");
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable";
  uint64_t before = status_bytes("VmHWM");
  rt->save_checkpoint(h, dir);
  const uint64_t save_growth = status_bytes("VmHWM") - before;
  ASSERT_TRUE(reset_peak_rss());
  before = status_bytes("VmHWM");
  rt->load_checkpoint(h, dir);
  const uint64_t load_growth = status_bytes("VmHWM") - before;
  std::printf("rank %d of %d: model %.1f MB, own shard (parameters + optimizer slices) %.1f MB, largest tensor "
              "%.2f MB; peak RSS grew by %.2f MB in save_checkpoint, %.2f MB in load_checkpoint\n",
              world.rank(), world.size(), double(model_bytes) / 1e6, double(own) / 1e6, double(largest) / 1e6,
              double(save_growth) / 1e6, double(load_growth) / 1e6);
  // A gather of one group's state (format 4) alone would take model_bytes;
  // what a save adds is one piece's host copy and the plans and metadata JSON
  // (rank 0 merges every rank's: about 19 MB for the 18,000 pieces here).
  EXPECT_LT(save_growth, largest + (32u << 20)) << "the save held more than one tensor and its metadata";
  // Mapped file pages count in RSS: a load may touch every byte of its own shard once.
  EXPECT_LT(load_growth, own + largest + (16u << 20)) << "the load held more than its shard and one tensor";
  world.barrier();
  if (world.rank() == 0) test::remove_launch_scratch(dir);
}

}  // namespace
}  // namespace bb
