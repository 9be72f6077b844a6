// Runtime::save_checkpoint / load_checkpoint: resumable training state.
//
// Layout of a checkpoint directory:
//   model/                        the model as an HF checkpoint (config.json + safetensors), from rank 0
//   optimizer/rank-R-of-W.safetensors   master weights and Adam moments of rank R's slice
//                                 of every trainable parameter group G ("G.master", "G.exp_avg", "G.exp_avg_sq";
//                                 "chunkV.G...." for virtual pipeline stage V when vpp > 1)
//   trainer_state.json            steps, scheduler steps and the parallel layout that wrote it
//   manifest.json                 size and CRC-32C of every other file, written last (checkpoint_files.h)
// Every rank writes into DIR.tmp; after a barrier rank 0 writes the manifest,
// moves an existing DIR aside, renames DIR.tmp to DIR and only then deletes the
// old one. A load first recovers an interrupted swap, then verifies each file
// it reads against the manifest before trusting a byte of it.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/safetensors.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

namespace fs = std::filesystem;

namespace {

// 2: optimizer state per parameter group. 3: manifest.json with a checksum per file.
constexpr int kFormatVersion = 3;

// Relative to the checkpoint directory, as the manifest names it.
std::string optimizer_file(int rank, int world) {
  return "optimizer/rank-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

// What decides which slice of the optimizer state each rank holds.
nlohmann::json layout_of(dist::ParallelState& ps, const ModelState& st) {
  return {{"world_size", ps.world_size()}, {"tp", ps.tp_size()}, {"dp", ps.dp_size()}, {"pp", ps.pp_size()},
          {"cp", ps.cp_size()}, {"ep", ps.ep_size()}, {"etp", ps.etp_size()},
          {"grad_bucket_size", st.cfg.optimizer.grad_bucket_size},
          {"no_weight_decay_1d", st.cfg.optimizer.no_weight_decay_1d}, {"frozen_params", st.cfg.frozen_params}};
}

// A group's name in the optimizer file; with several virtual pipeline stages
// per rank each stage's groups are prefixed "chunkV.".
std::string state_name(const ModelState& st, const DistributedOptimizer::GroupState& g) {
  if (st.chunks.size() == 1) return g.group->name();
  return "chunk" + std::to_string(g.store_index) + "." + g.group->name();
}

}  // namespace

void Runtime::save_checkpoint(ModelHandle& h, const std::string& dir) {
  ModelState& st = h.state();
  check_on_device(st, OffloadParts{true, true, false}, "save_checkpoint");
  dist::ParallelState& ps = *parallel_;
  const bool root = ps.world_rank() == 0;
  const std::string tmp = dir + ".tmp";
  if (root) {
    fs::remove_all(tmp);
    fs::create_directories(tmp + "/optimizer");
  }
  ps.world().barrier();
  write_hf_model(h, tmp + "/model", "param", {});
  DistributedOptimizer& opt = *st.optimizer;
  std::vector<std::pair<std::string, Tensor>> state;
  for (DistributedOptimizer::GroupState& g : opt.groups()) {
    const std::string name = state_name(st, g);
    state.insert(state.end(), {{name + ".master", g.master}, {name + ".exp_avg", g.exp_avg},
                               {name + ".exp_avg_sq", g.exp_avg_sq}});
  }
  write_safetensors(tmp + "/" + optimizer_file(ps.world_rank(), ps.world_size()), state,
                    {{"steps_taken", std::to_string(opt.steps_taken())}});
  ps.world().barrier();
  if (root) {
    nlohmann::json state = {{"format_version", kFormatVersion},
                            {"steps_taken", opt.steps_taken()},
                            {"scheduler_steps", st.scheduler_steps},
                            {"layout", layout_of(ps, st)},
                            {"model_config", st.chunks.front()->config()}};
    {
      std::ofstream f(tmp + "/trainer_state.json");
      f << state.dump(2) << "\n";
      BB_CHECK(f.good(), "cannot write ", tmp, "/trainer_state.json");
    }
    write_checkpoint_manifest(tmp);
    const std::string old = dir + ".old";
    fs::remove_all(old);
    if (fs::exists(dir)) fs::rename(dir, old);
    fs::rename(tmp, dir);
    fs::remove_all(old);
  }
  ps.world().barrier();
}

int64_t Runtime::load_checkpoint(ModelHandle& h, const std::string& dir) {
  ModelState& st = h.state();
  check_on_device(st, OffloadParts{true, true, false}, "load_checkpoint");
  dist::ParallelState& ps = *parallel_;
  // Every rank looks before rank 0 renames anything, so all decide alike.
  const CheckpointRecovery recovery = plan_checkpoint_recovery(dir);
  BB_CHECK(recovery.source != CheckpointRecovery::Source::None, "no training checkpoint at ", dir, " (nor at ", dir,
           ".tmp or ", dir, ".old)");
  ps.world().barrier();
  if (ps.world_rank() == 0 && !recovery.note.empty()) {
    std::fprintf(stderr, "recovered an interrupted checkpoint save: %s\n", recovery.note.c_str());
    apply_checkpoint_recovery(dir, recovery);
  }
  ps.world().barrier();
  const std::string state_path = dir + "/trainer_state.json";
  verify_checkpoint_files(dir, {"trainer_state.json"});
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(std::ifstream(state_path));
  } catch (const nlohmann::json::exception& e) {
    BB_FAIL(state_path, " is not valid JSON: ", e.what());
  }
  BB_CHECK(state.value("format_version", 0) == kFormatVersion, state_path, ": unsupported checkpoint format version ",
           state.value("format_version", 0));
  const nlohmann::json saved = state.at("layout"), now = layout_of(ps, st);
  for (const auto& [k, v] : now.items())
    BB_CHECK(saved.at(k) == v, "checkpoint ", dir, " was written with ", k, "=", saved.at(k).dump(),
             ", this run has ", k, "=", v.dump(), " (resharding on load is not supported yet)");
  BB_CHECK(state.at("model_config") == st.chunks.front()->config(), "checkpoint ", dir,
           " holds a model with another config than the one built (compare trainer_state.json's model_config)");
  const std::string shard = optimizer_file(ps.world_rank(), ps.world_size());
  std::vector<std::string> files = checkpoint_files_under(dir, "model/");
  files.push_back(shard);
  verify_checkpoint_files(dir, files);

  const HFCheckpoint model = HFCheckpoint::open(dir + "/model");
  for (auto& chunk : st.chunks) st.protocol->load_hf_weights(*chunk, model);
  DistributedOptimizer& opt = *st.optimizer;
  const SafetensorsFile f = SafetensorsFile::open(dir + "/" + shard);
  for (DistributedOptimizer::GroupState& g : opt.groups()) {
    const std::string group = state_name(st, g);
    for (auto [part, dst] : {std::pair<const char*, Tensor*>{"master", &g.master}, {"exp_avg", &g.exp_avg},
                             {"exp_avg_sq", &g.exp_avg_sq}}) {
      const std::string name = group + "." + part;
      BB_CHECK(f.has(name), "optimizer state of rank ", ps.world_rank(), " in ", dir, " lacks '", name, "'");
      const Tensor t = f.get(name);
      BB_CHECK(t.shape() == dst->shape() && t.dtype() == dst->dtype(), "optimizer state '", name, "' in ", dir,
               " is ", dtype_name(t.dtype()), shape_str(t.shape()), ", this run expects ", dtype_name(dst->dtype()),
               shape_str(dst->shape()));
      dst->copy_from(t);
    }
  }
  opt.set_steps_taken(state.at("steps_taken").get<int64_t>());
  st.scheduler_steps = state.at("scheduler_steps").get<int64_t>();
  ps.world().barrier();
  return opt.steps_taken();
}

}  // namespace bb
