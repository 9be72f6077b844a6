// The runtime API: create_runtime(RuntimeConfig) -> Runtime, and the training
// calls every tool and user program drives (names and semantics of the seed
// library):
//
//   auto rt = create_runtime(cfg);
//   ModelHandle h = rt->build_model();
//   { auto mode = rt->train_mode(h);
//     rt->zero_grad(h);
//     ForwardResult r = rt->forward_backward(h, batch, {}, num_microbatches);
//     OptimizerStepResult s = rt->optimizer_step(h);
//     rt->lr_scheduler_step(h); }
//
// Backends: "bb" (the optimised path: CUDA or CPU, every parallelism) and
// "ref" (the baseline: one process, CPU, float64 by default, no parallelism).
// Under mpirun every rank runs the same program; each dp rank passes its own
// part of the global batch (ModelHandle::dp_rank / dp_size say which).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "bumblebee/model/protocol.h"
#include "bumblebee/primitive/optim/distributed_optimizer.h"
#include "bumblebee/primitive/optim/lr_schedule.h"
#include "bumblebee/runtime/config.h"
#include "bumblebee/runtime/contracts.h"
#include "bumblebee/runtime/offload.h"

namespace bb {

struct ModelState;
class BucketBuffers;

// export_weights for RL weight sync: what the sink receives and how.
enum class ExportTarget {
  Host,     // pinned host memory (plain host memory on a CPU runtime)
  Device,   // the model's GPU: what a colocated inference engine reads (a CUDA runtime only)
};
struct ExportOptions {
  std::string dtype;          // "" keeps each tensor's dtype; else a dtype name (bfloat16, float32, float64)
  uint64_t bucket_bytes = 0;  // bytes per bucket (in `dtype`); 0: export.bucket_bytes. A larger tensor is its own bucket
  bool rank0_only = false;    // only world rank 0's sink is called (every rank still takes part)
  ExportTarget target = ExportTarget::Host;
};
// (hf_name, full tensor) pairs in HF naming, in export order: views into one
// buffer of the target's memory (runtime/bucket_buffers.h). The buffer is
// reused for a later bucket only once no tensor views it, so a sink may keep
// any tensor (a Tensor copy) as long as it likes.
using WeightBucket = std::vector<std::pair<std::string, Tensor>>;
using WeightBucketSink = std::function<void(const WeightBucket& bucket)>;

class ModelHandle {
 public:
  ModelHandle() = default;
  explicit ModelHandle(std::shared_ptr<ModelState> s) : state_(std::move(s)) {}
  int dp_rank() const;
  int dp_size() const;
  dist::Communicator& dp_group() const;
  const nlohmann::json& config() const;   // the model's normalised config
  ModelChunk& model() const;                 // this rank's first chunk (pp = 1: the whole model)
  std::vector<ModelChunk*> chunks() const;   // this rank's virtual pipeline stages, in order
  DistributedOptimizer& optimizer() const;
  ModelState& state() const;

 private:
  std::shared_ptr<ModelState> state_;
};

// Scoped train/eval mode: restores the previous mode when it goes out of scope.
class ModeGuard {
 public:
  ModeGuard(ModelState& s, bool training);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  ModelState* state_;
  bool previous_;
};

class Runtime {
 public:
  explicit Runtime(const RuntimeConfig& cfg);
  const RuntimeConfig& config() const { return cfg_; }
  dist::ParallelState& parallel_state() { return *parallel_; }
  Device device() const { return device_; }

  ModelHandle build_model();
  ModelHandle build_model(const BBConfig& overrides);   // advanced escape hatch

  [[nodiscard]] std::unique_ptr<ModeGuard> train_mode(ModelHandle& h);
  [[nodiscard]] std::unique_ptr<ModeGuard> eval_mode(ModelHandle& h);   // no gradients
  void zero_grad(ModelHandle& h);
  // calculate_entropy: ModelOutputs::entropy is filled (host outputs: forward
  // only or with a loss_fn), and a loss_fn may return grad_entropy.
  ForwardResult forward_backward(ModelHandle& h, const PackedBatch& data, const LossFn& loss_fn = {},
                                 int num_microbatches = 1, bool forward_only = false, bool calculate_entropy = false);
  OptimizerStepResult optimizer_step(ModelHandle& h);
  double lr_scheduler_step(ModelHandle& h);   // returns the learning rate for the next step
  double current_lr(ModelHandle& h) const;

  // Offload: moves `parts` of the model's state to pinned host memory
  // (target = Device::cpu()) and hands the freed device memory back to the
  // driver, or brings them back (target = device()). Calls that need an
  // offloaded part fail until it is back. On a CPU runtime the state already
  // is in host memory and to(h, cpu) does nothing. runtime/offload.h.
  void to(ModelHandle& h, Device target, const OffloadParts& parts = {});

  // Full-vocabulary logits [T, V] (host, float64) of a batch, for validation.
  Tensor logits(ModelHandle& h, const PackedBatch& data);
  // Streams (hf_name, full tensor) pairs in HF naming, one tensor at a time,
  // each on the model's device (without tp often a view of the parameter:
  // copy what you keep) or, after a pp transfer, on the host: gathered over
  // tp and ep per tensor, and with pp > 1 sent stage by stage in buckets of
  // at most export.bucket_bytes (or one tensor when it is larger).
  // Collective: every rank calls it, and every rank's sink sees every tensor.
  // runtime/hf_export.cpp.
  void export_weights(ModelHandle& h, const WeightSink& sink);
  // The same stream in `opts.dtype`, handed to the sink one bucket at a time:
  // a bucket holds at most opts.bucket_bytes (or one larger tensor) in one
  // buffer of opts.target's memory. On a GPU runtime a host bucket is
  // gathered on the device (cast there when a dtype is asked) and copied to
  // pinned host memory in one transfer. Memory: two buckets of the target's
  // memory while the caller drops each bucket before it takes the one after
  // next (bucket_buffers.h), plus, for a host target on a GPU, one device
  // bucket during the export; the two host buckets stay with the runtime for
  // the next export. Collective like the form above. runtime/weight_buckets.cpp.
  void export_weights(ModelHandle& h, const WeightBucketSink& sink, const ExportOptions& opts);
  // Writes the model as an HF checkpoint directory from world rank 0,
  // streaming (HFCheckpointWriter): shards under export.max_shard_bytes with
  // model.safetensors.index.json, tensors in export.dtype, config.json, and
  // generation_config.json and tokenizer files copied from hf_path.
  // Collective. `progress`, when set, is told the bytes written so far on rank 0.
  void save_hf_checkpoint(ModelHandle& h, const std::string& dir,
                          const std::function<void(uint64_t bytes)>& progress = {});
  // With peft.type=lora: the adapters as HF peft writes them (world rank 0
  // writes `dir`/adapter_model.safetensors and adapter_config.json, gathered
  // over tp and pp), so PeftModel.from_pretrained(base, dir) loads them.
  // Collective. runtime/peft.cpp.
  void save_peft_adapter(ModelHandle& h, const std::string& dir);
  // Training checkpoint (collective, every rank): the model as an HF directory,
  // the optimizer's master weights and Adam moments as HF-named full tensors,
  // and the step counters, written under a temporary name and swapped in so an
  // earlier checkpoint at `dir` survives any failure (runtime/checkpoint.cpp).
  // load_checkpoint restores all of it at this run's parallel layout, whatever
  // the layout that saved it (tp, pp, vpp, dp, ep, etp), and returns the number
  // of optimizer steps taken; the model config and frozen_params must match.
  void save_checkpoint(ModelHandle& h, const std::string& dir);
  int64_t load_checkpoint(ModelHandle& h, const std::string& dir);

 private:
  // save_hf_checkpoint with the export dtype given (export.dtype's values);
  // training checkpoints keep the parameter dtype ("param").
  // merge_lora: the base weights with their LoRA adapters merged in (peft.merge_on_export).
  void write_hf_model(ModelHandle& h, const std::string& dir, const std::string& dtype,
                      const std::function<void(uint64_t bytes)>& progress, bool merge_lora);
  // Streams what `chunk_export` emits for each of this rank's chunks to every
  // rank's sink, stage by stage over pp (export_weights' transport).
  using ChunkExport = std::function<void(ModelChunk& chunk, const WeightSink& sink)>;
  void stream_chunks(ModelHandle& h, const ChunkExport& chunk_export, const WeightSink& sink);
  void export_weights(ModelHandle& h, const WeightSink& sink, bool merge_lora);

  RuntimeConfig cfg_;
  std::shared_ptr<dist::ParallelState> parallel_;
  Device device_;
  // export_weights' two host buckets, kept for the next export (an RL loop
  // exports every step, and pinning 512 MiB costs about as long as copying it).
  std::shared_ptr<BucketBuffers> host_export_buffers_;
};

std::unique_ptr<Runtime> create_runtime(const RuntimeConfig& cfg);

}  // namespace bb
