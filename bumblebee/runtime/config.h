// Runtime configuration: RuntimeConfig{backend, hf_path, backend_cfg = BBConfig{...}},
// with the seed library's names and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bb {

struct ParallelConfig {
  int tp = 1;
  int etp = 0;      // 0 = same as tp
  int ep = 1;
  int pp = 1;
  int vpp = 1;
  int cp = 1;
  std::string pp_layout;   // stage layout, e.g. "E|t*5|t*6|t,L" (runtime/pipeline_layout.h); empty = balanced
};

struct OptimizerConfig {
  std::string optimizer = "adam";
  double lr = 1e-4;
  double min_lr = 0.0;
  double clip_grad = 1.0;
  double weight_decay = 0.01;
  int64_t lr_warmup_steps = 0;
  double lr_warmup_init = 0.0;
  int64_t lr_decay_steps = 0;
  std::string lr_decay_style = "constant";   // constant | linear | cosine | WSD
  std::string lr_wsd_decay_style = "linear";
  int64_t lr_wsd_decay_steps = 0;
  int64_t total_training_steps = 0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  double offload_fraction = 0.0;
  // Megatron's precision-aware optimizer (docs/training.md, "Optimizer
  // precision"): the storage dtype, fp32 or bf16, of the Adam moments, of the
  // gradient buffers backward accumulates into and dp reduces, and of the
  // weights AdamW updates (bf16: the bf16 parameters are their own master).
  std::string exp_avg_dtype = "fp32";
  std::string exp_avg_sq_dtype = "fp32";
  std::string main_grads_dtype = "fp32";
  std::string main_params_dtype = "fp32";
  // Elements per data-parallel gradient bucket (Megatron's default 40M):
  // each bucket's reduce-scatter starts as soon as backward has finished it.
  int64_t grad_bucket_size = 40000000;
  // Megatron's default: no weight decay on 1-D parameters (norm weights,
  // biases); they form their own parameter group with a weight-decay
  // multiplier of 0. bb-correctness turns it off to keep torch.optim.AdamW
  // semantics (one weight decay for every parameter).
  bool no_weight_decay_1d = true;
};

// Parameter-efficient fine-tuning (docs/peft.md): LoRA adapters on the named
// HF linear modules, every other parameter frozen. Fields follow HF peft's
// LoraConfig: target_modules, r (rank), lora_alpha, lora_dropout, use_rslora.
struct PeftConfig {
  std::string type = "none";        // none | lora | dora (LoRA with peft's magnitude vector)
  std::string target_modules = "q_proj,v_proj";   // comma list of HF module names, or all-linear
  std::string target_parameters;                   // comma list of fused expert weights (peft's target_parameters)
  int rank = 8;
  double alpha = 8.0;
  double dropout = 0.0;
  bool use_rslora = false;
  // An HF peft adapter directory (adapter_config.json, adapter_model.safetensors)
  // to start from instead of fresh adapters: continue training it.
  std::string adapter_path;
  // save_hf_checkpoint writes the merged weights W + s B A (peft's
  // merge_and_unload) instead of the base weights.
  bool merge_on_export = false;
};

struct BBConfig {
  std::string model_name = "auto";   // registry name, or "auto" from config.json's model_type
  std::string impl = "lite";
  ParallelConfig parallel;
  OptimizerConfig optimizer;
  std::string attention_backend = "auto";
  // Every CUDA op sums in a fixed order (ops/deterministic.h): identical runs
  // repeat bitwise at the same layout, at some cost in speed.
  bool deterministic = false;
  // MoE models: weight of the router load-balancing loss; unset: the model
  // config's (config.json's router_aux_loss_coef). Dense models reject it.
  std::optional<double> router_aux_loss_coef;
  // Multi-token prediction (deepseek_v3): weight of the MTP loss; unset: the
  // model config's (0.1). Models without MTP reject it.
  std::optional<double> mtp_loss_scaling_factor;
  bool load_hf_weights = true;        // false: random init from config.json alone
  // Parameters to freeze (no gradient, no optimizer state): a regular
  // expression matched against whole HF names, e.g. "model\\.embed_tokens\\..*"
  // (several: a|b); empty freezes nothing.
  std::string frozen_params;
  PeftConfig peft;
  nlohmann::json impl_cfg = nlohmann::json::object();     // model-specific keys
  nlohmann::json model_overrides = nlohmann::json::object();  // e.g. {"num_layers": 2}
  std::string device = "cpu";          // cpu | cuda | cuda:N (under MPI: cuda:local_rank)
  std::string dtype = "auto";          // auto (cpu: float32, cuda: bfloat16) | float64 | float32 | bfloat16
  // Activation recompute (Megatron's recompute_granularity and friends, see
  // docs/training.md "Activation recompute"): none | selective | full.
  std::string recompute = "none";
  std::string recompute_modules;       // selective: comma list of core_attn, layernorm, mlp, moe (empty: core_attn)
  std::string recompute_method = "block";   // block: the first N layers of each chunk; uniform: runs of N (full)
  int recompute_num_layers = 0;        // N; 0 with block: every layer
  // Keep the residual stream (embedding output, every layer's input and
  // output, their gradients) in float32 while the rest of the activations
  // are bfloat16: Megatron's fp32_residual_connection, and what HF training
  // under torch.autocast does. A no-op for float32 and float64 runs.
  bool fp32_residual_connection = false;
  uint64_t seed = 1234;
  double temperature = 1.0;
  // Tokens per LM-head chunk (the logits [chunk, V/tp] live one chunk at a
  // time); 0: the fewest chunks of at most 2^30 logits, split evenly.
  int lm_head_chunk_tokens = 0;
};

// How export_weights / save_hf_checkpoint stream the model out (docs/checkpoints.md).
struct ExportConfig {
  // Host bytes of tensors one pipeline stage sends to the writer at a time.
  uint64_t bucket_bytes = uint64_t(2) << 30;
  uint64_t max_shard_bytes = 5'000'000'000ull;   // HF's default shard limit, "5GB"
  std::string dtype = "source";   // source (the dtype hf_path stores each tensor in) | bf16 | fp32 | param
};

struct RuntimeConfig {
  std::string backend = "bb";   // "bb" (optimised, parallel) or "ref" (single-device baseline)
  std::string hf_path;          // HF model directory (config.json [+ safetensors])
  // Model plugins (shared libraries, model/plugin.h) create_runtime loads
  // before it resolves the model; the key `plugin` takes a comma-separated list.
  std::vector<std::string> plugins;
  BBConfig backend_cfg;
  ExportConfig export_cfg;
};

}  // namespace bb
