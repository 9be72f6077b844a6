// Runtime::save_checkpoint / load_checkpoint: resumable training state that
// loads at any parallel layout the model allows.
//
// Layout of a checkpoint directory (format version 5):
//   model/                  config.json and the side files of hf_path (tokenizer, generation config)
//   state/                  a sharded checkpoint (primitive/ckpt/sharded_checkpoint.h): each
//                           rank's rank-0000R.safetensors and metadata.json, holding the
//                           parameters ("model/<HF name>") and, for trainable parameters only,
//                           the master weights and Adam moments ("master/", "exp_avg/",
//                           "exp_avg_sq/"), each rank's own tp / ep / pp / dp slices
//   adapter/                with LoRA: HF peft's adapter files, for use outside bumblebee
//   trainer_state.json      steps, scheduler steps, the layout that wrote it, the model config
//   manifest.json           size and CRC-32C of every other file, written last (checkpoint_files.h)
// No rank gathers a tensor: each writes the pieces it holds (a piece held by
// several ranks, such as a dp replica of a parameter, by the lowest of them),
// and a load at any layout reads each of its own boxes from the pieces that
// cover it (sharded_state.h says which boxes a rank holds). Version 4
// checkpoints (full HF-named tensors written by rank 0) still load through
// checkpoint_v4.h; nothing writes them any more.
//
// Every rank writes into DIR.tmp; after a barrier rank 0 writes the manifest,
// moves an existing DIR aside, renames DIR.tmp to DIR and only then deletes the
// old one. A load first recovers an interrupted swap, then verifies each file
// it reads against the manifest (the shard files: against metadata.json, when
// first read) before trusting a byte of it.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>

#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/checkpoint_v4.h"
#include "bumblebee/runtime/hf_config_files.h"
#include "bumblebee/runtime/sharded_state.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

namespace fs = std::filesystem;

namespace {

// 2: optimizer state per parameter group. 3: manifest.json with a checksum per
// file. 4: optimizer state per parameter in HF naming, any layout. 5: every
// rank writes its own pieces (state/), none gathers.
constexpr int kFormatVersion = 5;
constexpr int kOldestReadable = 4;

// The layout that wrote a checkpoint, for the record and the log; a load at
// another one reshards.
nlohmann::json layout_of(dist::ParallelState& ps, const ModelState& st) {
  return {{"world_size", ps.world_size()}, {"tp", ps.tp_size()}, {"dp", ps.dp_size()}, {"pp", ps.pp_size()},
          {"vpp", int(st.chunks.size())}, {"cp", ps.cp_size()}, {"ep", ps.ep_size()}, {"etp", ps.etp_size()},
          {"grad_bucket_size", st.cfg.optimizer.grad_bucket_size},
          {"no_weight_decay_1d", st.cfg.optimizer.no_weight_decay_1d}, {"frozen_params", st.cfg.frozen_params}};
}

// Fills this rank's parameters and optimizer slices from the version 5 state/ of `dir`.
void read_sharded_state(ModelState& st, const std::string& dir) {
  ShardedCheckpoint ck = ShardedCheckpoint::open(dir + "/state");
  const std::string metadata = ck.dir() + "/" + kShardedMetadataFile;
  for (TensorPiece& piece : training_state_pieces(st, PieceUse::Load)) {
    BB_CHECK(ck.has(piece.key), metadata, " has no tensor '", piece.key, "', which this model holds",
             piece.key.starts_with("model/") ? "" : " with optimizer state (trainable)");
    BB_CHECK(ck.shape(piece.key) == piece.global_shape, metadata, ": tensor '", piece.key, "' has shape ",
             shape_str(ck.shape(piece.key)), ", the model expects ", shape_str(piece.global_shape));
    ck.read(piece.key, piece.box, piece.data);
  }
}

// Each rank reads (and verifies) only the files its pieces lie in, so a
// damaged file fails some ranks only: they agree before going on, and every
// rank fails, the ones that read the damage with its error.
void load_sharded_state(ModelState& st, const std::string& dir, dist::Communicator& world) {
  std::exception_ptr error;
  try {
    read_sharded_state(st, dir);
  } catch (const Error&) {
    error = std::current_exception();
  }
  const double failed = world.all_reduce_scalar(error ? 1.0 : 0.0, dist::ReduceOp::Max);
  if (error) std::rethrow_exception(error);
  BB_CHECK(failed == 0.0, "checkpoint ", dir, " could not be read by another rank (its error names the file)");
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
    fs::create_directories(tmp + "/model");
    fs::create_directories(tmp + "/state");
    write_hf_config_files(st.hf_config, cfg_.hf_path, tmp + "/model");
  }
  ps.world().barrier();
  // HF peft's files, so the adapters are usable outside bumblebee; a load reads state/.
  if (st.chunks.front()->params().lora() != nullptr) save_peft_adapter(h, tmp + "/adapter");
  DistributedOptimizer& opt = *st.optimizer;
  save_sharded_tensors(tmp + "/state", training_state_pieces(st, PieceUse::Save), ps.world());
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
  const int version = state.value("format_version", 0);
  BB_CHECK(version >= kOldestReadable && version <= kFormatVersion, state_path,
           ": unsupported checkpoint format version ", version, " (this build reads versions ", kOldestReadable, " to ",
           kFormatVersion, ")");
  const nlohmann::json model_config = st.chunks.front()->config();
  for (const auto& [k, v] : model_config.items())
    BB_CHECK(state.at("model_config").contains(k) && state.at("model_config").at(k) == v, "checkpoint ", dir,
             " holds a model with another config than the one built: ", k, " is ",
             state.at("model_config").contains(k) ? state.at("model_config").at(k).dump() : std::string("absent"),
             " there and ", v.dump(), " here (compare trainer_state.json's model_config)");
  BB_CHECK(state.at("model_config") == model_config, "checkpoint ", dir,
           " holds a model with another config than the one built (compare trainer_state.json's model_config)");
  // Which parameters have optimizer state is the one thing the layout cannot change.
  const nlohmann::json saved = state.at("layout");
  BB_CHECK(saved.at("frozen_params") == st.cfg.frozen_params, "checkpoint ", dir, " was written with frozen_params=",
           saved.at("frozen_params").dump(), ", this run has frozen_params=", nlohmann::json(st.cfg.frozen_params).dump(),
           " (frozen parameters have no optimizer state to resume)");
  if (version == 4) {
    load_checkpoint_v4(st, dir, state);
  } else {
    verify_checkpoint_files(dir, checkpoint_files_under(dir, "model/"));
    verify_checkpoint_files(dir, {std::string("state/") + kShardedMetadataFile});
    load_sharded_state(st, dir, ps.world());
  }
  DistributedOptimizer& opt = *st.optimizer;
  opt.set_steps_taken(state.at("steps_taken").get<int64_t>());
  st.scheduler_steps = state.at("scheduler_steps").get<int64_t>();
  ps.world().barrier();
  return opt.steps_taken();
}

}  // namespace bb
