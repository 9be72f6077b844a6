// Runtime::export_weights and Runtime::save_hf_checkpoint: the model streamed
// out in HF naming, one tensor at a time, into a bounded bucket per pipeline
// stage and a shard writer on world rank 0 (docs/checkpoints.md).
#include <filesystem>
#include <fstream>
#include <map>

#include "bumblebee/primitive/ckpt/fused_experts.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint_writer.h"
#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/runtime/hf_config_files.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/pipeline_transfer.h"
#include "bumblebee/runtime/runtime.h"

namespace bb {

namespace fs = std::filesystem;

namespace {

// Files of an HF model folder besides config.json and the weights that
// transformers and tokenizers read; carried over from hf_path when present.
constexpr const char* kSideFiles[] = {"generation_config.json", "tokenizer.json",   "tokenizer_config.json",
                                      "special_tokens_map.json", "vocab.json",      "merges.txt",
                                      "tokenizer.model",         "added_tokens.json", "chat_template.jinja"};

void copy_file_atomically(const fs::path& from, const fs::path& to) {
  const fs::path tmp = to.string() + ".tmp";
  std::error_code ec;
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  BB_CHECK(!ec, "cannot copy '", from.string(), "' to '", tmp.string(), "': ", ec.message());
  fs::rename(tmp, to, ec);
  BB_CHECK(!ec, "cannot rename '", tmp.string(), "' to '", to.string(), "': ", ec.message());
}

bool has_safetensors(const std::string& dir) {
  return !dir.empty() && (fs::exists(fs::path(dir) / "model.safetensors") ||
                          fs::exists(fs::path(dir) / "model.safetensors.index.json"));
}

}  // namespace

void Runtime::export_weights(ModelHandle& h, const WeightSink& sink) {
  export_weights(h, sink, cfg_.backend_cfg.peft.merge_on_export);
}

void Runtime::export_weights(ModelHandle& h, const WeightSink& sink, bool merge_lora) {
  ModelState& st = h.state();
  const LoraConfig* lora = st.chunks.front()->params().lora();
  BB_CHECK(!merge_lora || !lora || lora->target_parameters.empty(),
           "peft.merge_on_export with peft.target_parameters (adapters on the MoE experts) is not built; export the ",
           "adapter (save_peft_adapter) and merge it with peft's merge_and_unload");
  stream_chunks(
      h,
      [&](ModelChunk& chunk, const WeightSink& out) {
        if (!merge_lora || !chunk.params().lora()) {
          st.protocol->export_hf_weights(chunk, *st.context, out);
          return;
        }
        st.protocol->export_hf_weights(chunk, *st.context, [&](const std::string& name, const Tensor& t) {
          out(name, merge_lora_weight(chunk.params(), st.context->tp(), name, t));
        });
      },
      sink);
}

void Runtime::stream_chunks(ModelHandle& h, const ChunkExport& chunk_export, const WeightSink& sink) {
  ModelState& st = h.state();
  if (parallel_->pp_size() == 1) {
    chunk_export(*st.chunks.front(), sink);
    return;
  }
  // Stage by stage in pipeline order: the stage exporting fills a bucket and
  // broadcasts it over its pp group when it is full; an empty bucket ends the stage.
  dist::Communicator& pp = parallel_->pp();
  const uint64_t limit = cfg_.export_cfg.bucket_bytes;
  for (int stage = 0; stage < parallel_->pp_size(); ++stage) {
    if (pp.rank() != stage) {
      for (;;) {
        const auto bucket = broadcast_named_tensors(pp, stage, device_, {});
        if (bucket.empty()) break;
        for (const auto& [name, t] : bucket) sink(name, t);
      }
      continue;
    }
    std::vector<std::pair<std::string, Tensor>> bucket;
    uint64_t bytes = 0;
    auto flush = [&] {
      for (const auto& [name, t] : broadcast_named_tensors(pp, stage, device_, bucket)) sink(name, t);
      bucket.clear();
      bytes = 0;
    };
    for (auto& chunk : st.chunks)
      chunk_export(*chunk, [&](const std::string& name, const Tensor& t) {
        if (!bucket.empty() && bytes + t.nbytes() > limit) flush();
        bucket.emplace_back(name, t);
        bytes += t.nbytes();
      });
    if (!bucket.empty()) flush();
    broadcast_named_tensors(pp, stage, device_, {});
  }
}

void Runtime::save_hf_checkpoint(ModelHandle& h, const std::string& dir,
                                 const std::function<void(uint64_t bytes)>& progress) {
  write_hf_model(h, dir, cfg_.export_cfg.dtype, progress, cfg_.backend_cfg.peft.merge_on_export);
}

void Runtime::write_hf_model(ModelHandle& h, const std::string& dir, const std::string& how,
                             const std::function<void(uint64_t bytes)>& progress, bool merge_lora) {
  const bool writer_rank = parallel_->world_rank() == 0;
  std::optional<DType> fixed;
  if (how == "bf16") fixed = DType::BF16;
  if (how == "fp32") fixed = DType::F32;
  // export.dtype=source: each tensor in the dtype hf_path stores it in (a
  // round trip is then bit-identical); the parameter dtype for tensors it lacks.
  // A tensor the source stores otherwise (a fused expert's slice) takes the
  // dtype most of the source's tensors have.
  std::optional<HFCheckpoint> source;
  std::optional<DType> source_default;
  std::map<std::string, int64_t> fused_layers;   // experts written fused where the source stores them so
  if (writer_rank && has_safetensors(cfg_.hf_path)) {
    source = HFCheckpoint::open(cfg_.hf_path);
    fused_layers = fused_expert_layers(*source);
  }
  if (source && how == "source") {
    std::map<DType, size_t> count;
    for (const std::string& name : source->names()) ++count[source->dtype(name)];
    for (const auto& [dt, n] : count)
      if (!source_default || n > count[*source_default]) source_default = dt;
  }
  std::optional<HFCheckpointWriter> writer;
  if (writer_rank) writer.emplace(dir, cfg_.export_cfg.max_shard_bytes, fixed);
  uint64_t written = 0;
  FusedExpertSink write(std::move(fused_layers), [&](const std::string& name, const Tensor& t) {
    const bool source_dtype = how == "source" && source && source->has(name);
    std::optional<DType> want = source_dtype ? std::optional<DType>(source->dtype(name)) : source_default;
    const Tensor out = want && *want != t.dtype() ? t.to(Device::cpu()).to(*want) : t;
    writer->add(name, out);
    written += fixed ? uint64_t(t.numel()) * dtype_size(*fixed) : out.nbytes();
    if (progress) progress(written);
  });
  export_weights(h, [&](const std::string& name, const Tensor& t) {
    if (writer) write(name, t);
  }, merge_lora);
  if (!writer_rank) return;
  write.finish();
  writer->finish();
  write_hf_config_files(h.state().hf_config, cfg_.hf_path, dir);
}

void write_hf_config_files(const nlohmann::json& hf_config, const std::string& hf_path, const std::string& dir) {
  const std::string tmp = dir + "/config.json.tmp";
  {
    std::ofstream f(tmp);
    f << hf_config.dump(2) << "\n";
    BB_CHECK(f.good(), "cannot write ", tmp);
  }
  fs::rename(tmp, dir + "/config.json");
  if (hf_path.empty() || fs::equivalent(hf_path, dir)) return;
  for (const char* file : kSideFiles) {
    const fs::path from = fs::path(hf_path) / file;
    if (fs::is_regular_file(from)) copy_file_atomically(from, fs::path(dir) / file);
  }
}

}  // namespace bb
