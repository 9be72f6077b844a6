// bb-convert: checkpoints between Hugging Face and bumblebee's training layout.
//
//   bb-convert hf_to_bb in=HF_DIR out=DIR [backend.parallel.*=N ...]   an HF model as a training checkpoint
//   bb-convert bb_to_hf in=DIR out=HF_DIR [dtype=bf16|fp32|source]    a training checkpoint's model as HF
//   bb-convert reshard  in=DIR out=DIR [backend.parallel.*=N ...]      a training checkpoint at another layout
//   bb-convert help
// Runs under mpirun for models larger than one process should hold: every
// rank reads only its own shard (layout keys pick the layout), and the HF
// export streams one tensor at a time to rank 0 (docs/checkpoints.md). Rank 0
// draws a progress line on stderr and ends with the bytes written and GB/s;
// hf_to_bb then reports every rank's peak host memory against its shard.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/error.h"
#include "bumblebee/core/host_memory.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/runtime/tool_main.h"

namespace bb {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ConfigSchema convert_schema() {
  ConfigSchema s("bb-convert", "bb-convert hf_to_bb|bb_to_hf|reshard in=DIR out=DIR [key=value ...]");
  s.add_runtime_keys();
  using T = ConfigType;
  const std::string g = "bb-convert";
  s.add({"in", g, T::String, "", "source: an HF model folder (hf_to_bb) or a training checkpoint (bb_to_hf, reshard)"});
  s.add({"out", g, T::String, "", "destination folder; an existing one must hold a checkpoint of the same kind"});
  s.add(ConfigKey{"dtype", g, T::String, "source", "bb_to_hf: dtype of the written tensors (export.dtype)"}.one_of(
      {"source", "bf16", "fp32"}));
  return s;
}

// Refuses to write into a folder that holds something other than a checkpoint of this kind.
void check_output_dir(const std::string& out, const char* marker, const char* kind) {
  if (!fs::exists(out)) return;
  BB_CHECK(fs::is_directory(out), "out=", out, " exists and is not a folder");
  const bool empty = fs::directory_iterator(out) == fs::directory_iterator();
  BB_CHECK(empty || fs::exists(fs::path(out) / marker), "out=", out, " exists and is not ", kind, " (no ", marker,
           "); give a new or empty folder");
}

struct Progress {
  bool on = false;
  uint64_t total = 0;
  Clock::time_point start = Clock::now();
  void show(uint64_t bytes) const {
    if (!on) return;
    const double s = std::chrono::duration<double>(Clock::now() - start).count(), gb = double(bytes) / 1e9;
    const int width = 30, filled = total ? int(width * std::min(1.0, double(bytes) / double(total))) : 0;
    std::fprintf(stderr, "\r[%s%s] %.3f GB  %.2f GB/s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), gb, s > 0 ? gb / s : 0.0);
  }
  void done(uint64_t bytes) {
    if (!on) return;
    if (total == 0) total = bytes;
    show(bytes);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    std::fprintf(stderr, "\nwrote %.3f GB in %.2f s (%.2f GB/s)\n", double(bytes) / 1e9, s,
                 s > 0 ? double(bytes) / 1e9 / s : 0.0);
  }
};

// The model's tensors a training checkpoint holds, name -> (shape, dtype):
// state/metadata.json's "model/" tensors (format 5) or model/'s safetensors (format 4).
std::map<std::string, std::pair<Shape, DType>> saved_model_tensors(const std::string& ckpt) {
  std::map<std::string, std::pair<Shape, DType>> out;
  if (fs::exists(fs::path(ckpt) / "state" / kShardedMetadataFile)) {
    const ShardedCheckpoint ck = ShardedCheckpoint::open(ckpt + "/state");
    for (const std::string& key : ck.keys())
      if (key.starts_with("model/")) out[key.substr(6)] = {ck.shape(key), ck.dtype(key)};
  } else {
    const HFCheckpoint ck = HFCheckpoint::open(ckpt + "/model");
    for (const std::string& name : ck.names()) out[name] = {ck.shape(name), ck.dtype(name)};
  }
  BB_CHECK(!out.empty(), "bb-convert: training checkpoint ", ckpt, " holds no model tensors");
  return out;
}

// Bytes the export of a checkpoint's model writes (the progress bar's 100%):
// each tensor in `dtype` (bf16 | fp32), or as stored (source).
uint64_t export_bytes(const std::string& ckpt, const std::string& dtype) {
  uint64_t n = 0;
  for (const auto& [name, t] : saved_model_tensors(ckpt)) {
    const size_t es = dtype == "bf16" ? 2 : dtype == "fp32" ? 4 : dtype_size(t.second);
    n += uint64_t(shape_numel(t.first)) * es;
  }
  return n;
}

uint64_t folder_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

// What hf_to_bb reports of one rank's host memory (docs/checkpoints.md,
// "Import memory"): the peak resident set over the run against the rank's
// own shard. Host memory means the whole resident set, anonymous and
// file-backed pages together (VmHWM), so mapped checkpoint pages count.
struct ImportMemory {
  double baseline_rss = 0;   // after the runtime is up, before the model exists
  double peak_rss = 0;       // VmHWM at the end (reset to baseline_rss first where the kernel allows)
  double rss_anon = 0, rss_file = 0;   // at the end
  double shard_bytes = 0;    // this rank's parameters (its tp / pp / ep shard of the weights)
  double state_bytes = 0;    // every tensor it holds: parameters, gradients, optimizer state
};

constexpr const char* kImportMemoryFields[] = {"baseline_rss", "peak_rss", "rss_anon", "rss_file", "shard_bytes",
                                               "state_bytes"};

double& field(ImportMemory& m, int i) {
  double* f[] = {&m.baseline_rss, &m.peak_rss, &m.rss_anon, &m.rss_file, &m.shard_bytes, &m.state_bytes};
  return *f[i];
}

double param_bytes(const ModelHandle& h) {
  double n = 0;
  for (ModelChunk* c : h.chunks())
    for (const Parameter& p : c->params().params()) n += double(p.value.nbytes());
  return n;
}

// Every rank prints its own line on stderr; world rank 0 also prints one JSON
// line on stdout with every rank's figures (gathered by scalar all-reduces, so
// on any communicator) and the model's total and largest tensor bytes.
void report_import_memory(Runtime& rt, ImportMemory m, const HFCheckpoint& source) {
  dist::Communicator& world = rt.parallel_state().world();
  const int rank = world.rank(), n = world.size();
  std::fprintf(stderr,
               "rank %d: peak host memory %.1f MB (+%.1f MB over %.1f MB at start; at the end anon %.1f MB, file "
               "%.1f MB), shard %.1f MB, all state %.1f MB\n",
               rank, m.peak_rss / 1e6, (m.peak_rss - m.baseline_rss) / 1e6, m.baseline_rss / 1e6, m.rss_anon / 1e6,
               m.rss_file / 1e6, m.shard_bytes / 1e6, m.state_bytes / 1e6);
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < n; ++r) {
    nlohmann::json one;
    for (int i = 0; i < int(std::size(kImportMemoryFields)); ++i)
      one[kImportMemoryFields[i]] = uint64_t(world.all_reduce_scalar(r == rank ? field(m, i) : 0.0));
    ranks.push_back(one);
  }
  if (rank != 0) return;
  uint64_t model_bytes = 0, largest = 0;
  for (const std::string& name : source.names()) {
    const uint64_t b = uint64_t(shape_numel(source.shape(name))) * dtype_size(source.dtype(name));
    model_bytes += b;
    largest = std::max(largest, b);
  }
  nlohmann::json j{{"import_memory", ranks}, {"model_bytes", model_bytes}, {"largest_tensor_bytes", largest}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// backend.dtype of the parameters a training checkpoint holds.
std::string saved_param_dtype(const std::string& ckpt) {
  switch (saved_model_tensors(ckpt).begin()->second.second) {
    case DType::F64: return "float64";
    case DType::BF16: return "bfloat16";
    default: return "float32";
  }
}

// The model of training checkpoint `in`, built from its own config.json at
// this run's layout (in its saved dtype unless backend.dtype is given) and
// filled by load_checkpoint, which reshards it.
ModelHandle load_training_checkpoint(Runtime& rt, const std::string& in) {
  ModelHandle h = rt.build_model();
  rt.load_checkpoint(h, in);
  return h;
}

RuntimeConfig checkpoint_runtime_config(RuntimeConfig cfg, const ConfigArgs& args, const std::string& in) {
  cfg.hf_path = in + "/model";
  cfg.backend_cfg.load_hf_weights = false;
  // The parameters keep the dtype they were saved in (float64 state stays
  // float64) unless backend.dtype says otherwise.
  if (!args.has("backend.dtype")) cfg.backend_cfg.dtype = saved_param_dtype(in);
  return cfg;
}

int run(int argc, char** argv) {
  const ConfigSchema schema = convert_schema();
  if (asks_for_help(argc, argv)) {
    std::fputs(schema.help().c_str(), stdout);
    return 0;
  }
  BB_CHECK(argc >= 2, "bb-convert: no command given (hf_to_bb, bb_to_hf, reshard, help)");
  const std::string mode = argv[1];
  BB_CHECK(mode == "hf_to_bb" || mode == "bb_to_hf" || mode == "reshard", "bb-convert: unknown command '", mode,
           "' (hf_to_bb, bb_to_hf, reshard, help)");
  const ConfigArgs args = schema.parse(argc, argv, 2);
  BB_CHECK(args.has("in") && args.has("out"), "bb-convert ", mode, ": in=DIR and out=DIR are required");
  const std::string in = args.str("in"), out = args.str("out");
  BB_CHECK(fs::is_directory(in), "bb-convert ", mode, ": in=", in, " is not a folder");
  RuntimeConfig cfg = args.runtime;
  Progress progress;
  if (mode == "hf_to_bb") {
    check_output_dir(out, "trainer_state.json", "a training checkpoint");
    cfg.hf_path = in;
    auto rt = create_runtime(cfg);
    progress.on = rt->parallel_state().world_rank() == 0;
    ImportMemory mem;
    reset_peak_rss();
    mem.baseline_rss = double(host_memory().rss);
    ModelHandle h = rt->build_model();
    mem.shard_bytes = param_bytes(h);
    mem.state_bytes = double(device_bytes_in_use(rt->device()));
    rt->save_checkpoint(h, out);
    progress.done(progress.on ? folder_bytes(out) : 0);
    const HostMemory end = host_memory();
    mem.peak_rss = double(end.peak_rss);
    mem.rss_anon = double(end.rss_anon);
    mem.rss_file = double(end.rss_file);
    report_import_memory(*rt, mem, HFCheckpoint::open(in));
    return 0;
  }
  if (mode == "reshard") {
    BB_CHECK(!fs::exists(out) || !fs::equivalent(in, out), "bb-convert reshard: out=", out, " is in=", in,
             "; give another folder");
    BB_CHECK(fs::exists(fs::path(in) / "trainer_state.json"), "bb-convert reshard: in=", in,
             " is not a training checkpoint (no trainer_state.json)");
    check_output_dir(out, "trainer_state.json", "a training checkpoint");
    auto rt = create_runtime(checkpoint_runtime_config(cfg, args, in));
    progress.on = rt->parallel_state().world_rank() == 0;
    ModelHandle h = load_training_checkpoint(*rt, in);
    rt->save_checkpoint(h, out);
    progress.done(progress.on ? folder_bytes(out) : 0);
    return 0;
  }
  check_output_dir(out, "config.json", "an HF model folder");
  // Loaded at this run's layout (load_checkpoint verifies every file it
  // reads) and streamed out one tensor at a time.
  verify_checkpoint_files(in, {"trainer_state.json"});
  cfg = checkpoint_runtime_config(cfg, args, in);
  cfg.export_cfg.dtype = args.str("dtype");
  auto rt = create_runtime(cfg);
  progress.on = rt->parallel_state().world_rank() == 0;
  if (progress.on) progress.total = export_bytes(in, cfg.export_cfg.dtype);
  ModelHandle h = load_training_checkpoint(*rt, in);
  uint64_t written = 0;
  rt->save_hf_checkpoint(h, out, [&](uint64_t bytes) {
    written = bytes;
    progress.show(bytes);
  });
  progress.done(written);
  return 0;
}

}  // namespace
}  // namespace bb

int main(int argc, char** argv) { return bb::run_tool(argc, argv, bb::run); }
