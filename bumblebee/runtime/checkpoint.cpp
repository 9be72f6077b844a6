// Runtime::save_checkpoint / load_checkpoint: resumable training state that
// loads at any parallel layout the model allows.
//
// Layout of a checkpoint directory:
//   model/                  the model as an HF checkpoint (config.json + safetensors), from rank 0
//   optimizer/master/       the fp32 (float64 with float64 parameters) master weights,
//   optimizer/exp_avg/      and the Adam moments, each an HF-named safetensors set of
//   optimizer/exp_avg_sq/   full tensors: the trainable parameters' state under their HF names
//   trainer_state.json      steps, scheduler steps, the layout that wrote it, and every
//                           optimizer tensor's global shape and dtype
//   manifest.json           size and CRC-32C of every other file, written last (checkpoint_files.h)
// The optimizer state goes through the model's own checkpoint mapping, as the
// model does: each trainable group's state is gathered over its communicator
// into a buffer laid out as its flat parameters, the parameters are pointed at
// it, and the HF export streams it out one tensor at a time (fused qkv and
// gate|up, tp / pp / ep / etp slices and tied embeddings handled once, in the
// model package). A load reads it back the same way at its own layout and
// keeps only this rank's dp slices. Frozen and buffer groups (the router's
// expert bias) have no optimizer state: the mapping covers the whole model, so
// their tensors in optimizer/ are their values, read back unchanged.
//
// Every rank writes into DIR.tmp; after a barrier rank 0 writes the manifest,
// moves an existing DIR aside, renames DIR.tmp to DIR and only then deletes the
// old one. A load first recovers an interrupted swap, then verifies each file
// it reads against the manifest before trusting a byte of it.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint_writer.h"
#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

namespace fs = std::filesystem;

namespace {

// 2: optimizer state per parameter group. 3: manifest.json with a checksum per
// file. 4: optimizer state per parameter in HF naming, any layout.
constexpr int kFormatVersion = 4;

using State = DistributedOptimizer::State;

struct OptimizerPart {
  State state;
  const char* name;   // folder under optimizer/
};
constexpr OptimizerPart kOptimizerParts[] = {
    {State::Master, "master"}, {State::ExpAvg, "exp_avg"}, {State::ExpAvgSq, "exp_avg_sq"}};

// The layout that wrote a checkpoint, for the record and the log; a load at
// another one reshards.
nlohmann::json layout_of(dist::ParallelState& ps, const ModelState& st) {
  return {{"world_size", ps.world_size()}, {"tp", ps.tp_size()}, {"dp", ps.dp_size()}, {"pp", ps.pp_size()},
          {"vpp", int(st.chunks.size())}, {"cp", ps.cp_size()}, {"ep", ps.ep_size()}, {"etp", ps.etp_size()},
          {"grad_bucket_size", st.cfg.optimizer.grad_bucket_size},
          {"no_weight_decay_1d", st.cfg.optimizer.no_weight_decay_1d}, {"frozen_params", st.cfg.frozen_params}};
}

// While alive, every trainable group's parameters view the gathered master
// weights or moments of `part` (or, for a load, a zero buffer of the master
// dtype to be filled); restores the parameter buffers when it ends.
class StateAsParams {
 public:
  StateAsParams(DistributedOptimizer& opt, State part, bool gather) : opt_(opt) {
    for (DistributedOptimizer::GroupState& g : opt.groups()) {
      Tensor full = gather ? opt.gather_state(g, part)
                           : Tensor::zeros({g.group->flat_params().numel()}, g.master.dtype(), g.master.device());
      saved_.push_back(g.group->swap_flat_params(std::move(full)));
    }
  }
  ~StateAsParams() {
    for (size_t i = 0; i < saved_.size(); ++i) opt_.groups()[i].group->swap_flat_params(std::move(saved_[i]));
  }
  // The buffer group i's parameters view now.
  const Tensor& state(size_t i) { return opt_.groups()[i].group->flat_params(); }

 private:
  DistributedOptimizer& opt_;
  std::vector<Tensor> saved_;
};

// The tensors an optimizer folder must hold, as trainer_state.json records them.
void check_covered(const nlohmann::json& recorded, const HFCheckpoint& ck, const std::string& what) {
  for (const std::string& name : ck.names()) {
    BB_CHECK(recorded.contains(name), "trainer_state.json of ", what, " does not cover tensor '", name, "' of ",
             ck.dir());
    const nlohmann::json& r = recorded.at(name);
    BB_CHECK(r.at("shape").get<Shape>() == ck.shape(name) && r.at("dtype").get<std::string>() ==
                 dtype_name(ck.dtype(name)),
             "tensor '", name, "' of ", ck.dir(), " is ", dtype_name(ck.dtype(name)), shape_str(ck.shape(name)),
             ", trainer_state.json of ", what, " records ", r.dump());
  }
  for (const auto& [name, r] : recorded.items())
    BB_CHECK(ck.has(name), ck.dir(), " lacks tensor '", name, "' that trainer_state.json of ", what, " records");
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
  write_hf_model(h, tmp + "/model", "param", {}, false);
  const bool lora = st.chunks.front()->params().lora() != nullptr;
  if (lora) save_peft_adapter(h, tmp + "/adapter");
  DistributedOptimizer& opt = *st.optimizer;
  nlohmann::json tensors;   // per optimizer part: name -> global shape and dtype
  for (const OptimizerPart& part : kOptimizerParts) {
    const std::string out = tmp + "/optimizer/" + part.name;
    StateAsParams view(opt, part.state, true);
    if (lora) {
      // Under LoRA only the adapters train: their state is an adapter folder
      // (the base weights the model export would stream are frozen).
      save_peft_adapter(h, out + "/adapter");
      continue;
    }
    std::optional<HFCheckpointWriter> writer;
    if (root) writer.emplace(out, cfg_.export_cfg.max_shard_bytes);
    nlohmann::json& recorded = tensors[part.name] = nlohmann::json::object();
    export_weights(h, [&](const std::string& name, const Tensor& t) {
      if (!writer) return;
      writer->add(name, t);
      recorded[name] = {{"shape", t.shape()}, {"dtype", dtype_name(t.dtype())}};
    });
    if (writer) writer->finish();
  }
  ps.world().barrier();
  if (root) {
    nlohmann::json state = {{"format_version", kFormatVersion},
                            {"steps_taken", opt.steps_taken()},
                            {"scheduler_steps", st.scheduler_steps},
                            {"layout", layout_of(ps, st)},
                            {"optimizer_tensors", tensors},
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
           state.value("format_version", 0), " (this build reads version ", kFormatVersion, ")");
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
  std::vector<std::string> files = checkpoint_files_under(dir, "model/");
  for (const OptimizerPart& part : kOptimizerParts) {
    const std::vector<std::string> f = checkpoint_files_under(dir, std::string("optimizer/") + part.name + "/");
    BB_CHECK(!f.empty(), "checkpoint ", dir, " has no optimizer/", part.name, "/ in its manifest");
    files.insert(files.end(), f.begin(), f.end());
  }
  for (const std::string& f : checkpoint_files_under(dir, "adapter/")) files.push_back(f);
  verify_checkpoint_files(dir, files);

  const HFCheckpoint model = HFCheckpoint::open(dir + "/model");
  for (auto& chunk : st.chunks) {
    st.protocol->load_hf_weights(*chunk, model);
    if (const LoraConfig* lora = chunk->params().lora()) load_peft_adapter(chunk->params(), dir + "/adapter", *lora, chunk->layers());
  }
  DistributedOptimizer& opt = *st.optimizer;
  for (const OptimizerPart& part : kOptimizerParts) {
    const std::string part_dir = dir + "/optimizer/" + part.name;
    StateAsParams view(opt, part.state, false);
    if (const LoraConfig* lora = st.chunks.front()->params().lora()) {
      for (auto& chunk : st.chunks) load_peft_adapter(chunk->params(), part_dir + "/adapter", *lora, chunk->layers());
    } else {
      const HFCheckpoint ck = HFCheckpoint::open(part_dir);
      check_covered(state.at("optimizer_tensors").at(part.name), ck, dir);
      for (auto& chunk : st.chunks) st.protocol->load_hf_weights(*chunk, ck);
    }
    for (size_t i = 0; i < opt.groups().size(); ++i) opt.scatter_state(opt.groups()[i], part.state, view.state(i));
  }
  opt.set_steps_taken(state.at("steps_taken").get<int64_t>());
  st.scheduler_steps = state.at("scheduler_steps").get<int64_t>();
  ps.world().barrier();
  return opt.steps_taken();
}

}  // namespace bb
