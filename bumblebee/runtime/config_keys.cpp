// The runtime's keys: one per field of RuntimeConfig, BBConfig, ParallelConfig
// and OptimizerConfig, with the seed library's dotted names. Defaults come from
// the structs themselves, so config.h stays the one place that sets them.
#include <algorithm>
#include <cctype>
#include <limits>

#include "bumblebee/core/error.h"
#include "bumblebee/runtime/config_schema.h"

namespace bb {

namespace {

using json = nlohmann::json;
using Set = std::function<void(RuntimeConfig&, const json&)>;

constexpr int64_t kIntMax = std::numeric_limits<int>::max(), kIntMin = std::numeric_limits<int>::min();
constexpr double kInf = std::numeric_limits<double>::infinity();

ConfigKey key(std::string name, std::string group, ConfigType type, json def, std::string doc, Set set) {
  ConfigKey k;
  k.name = std::move(name);
  k.group = std::move(group);
  k.type = type;
  k.default_value = std::move(def);
  k.doc = std::move(doc);
  k.set = std::move(set);
  return k;
}

// An Int key of a C++ `int` field: values beyond int's range do not fit.
ConfigKey int_key(std::string name, std::string group, int def, std::string doc, Set set) {
  return key(std::move(name), std::move(group), ConfigType::Int, def, std::move(doc), std::move(set))
      .in_range(kIntMin, kIntMax);
}

// "5GB", "2GiB", "500MB", "123" (bytes): decimal units as HF's max_shard_size, binary ones with an i.
uint64_t byte_size(const std::string& key, const std::string& text) {
  size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    BB_FAIL("key '", key, "': '", text, "' is not a size (e.g. 5GB, 2GiB, 1048576)");
  }
  std::string unit = text.substr(end);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));   // 5gb, 20kB as HF accepts them
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
      {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      const double bytes = value * scale;
      BB_CHECK(bytes >= 1 && bytes < 1.8e19, "key '", key, "': '", text, "' must be at least one byte");
      return uint64_t(bytes);
    }
  BB_FAIL("key '", key, "': '", text, "' has an unknown unit '", unit, "' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

BBConfig& bb_of(RuntimeConfig& c) { return c.backend_cfg; }
ParallelConfig& parallel_of(RuntimeConfig& c) { return c.backend_cfg.parallel; }
OptimizerConfig& optimizer_of(RuntimeConfig& c) { return c.backend_cfg.optimizer; }

}  // namespace

void ConfigSchema::add_runtime_keys() {
  using T = ConfigType;
  const RuntimeConfig d;
  const BBConfig& b = d.backend_cfg;
  const ParallelConfig& p = b.parallel;
  const OptimizerConfig& o = b.optimizer;

  add(key("backend", "runtime", T::String, d.backend, "bb: optimised, parallel; ref: the single-device baseline",
          [](RuntimeConfig& c, const json& v) { c.backend = v; })
          .one_of({"bb", "ref"}));
  add(key("hf_path", "runtime", T::String, d.hf_path, "HF model directory: config.json, plus safetensors when loading weights",
          [](RuntimeConfig& c, const json& v) { c.hf_path = v; }));
  add(key("plugin", "runtime", T::String, "",
          "model plugin shared libraries to load first, comma-separated (docs/plugins.md)",
          [](RuntimeConfig& c, const json& v) {
            c.plugins.clear();
            const std::string list = v;
            for (size_t begin = 0; begin <= list.size();) {
              const size_t end = std::min(list.find(',', begin), list.size());
              if (end > begin) c.plugins.push_back(list.substr(begin, end - begin));
              begin = end + 1;
            }
          }));

  add(key("backend.model_name", "backend", T::String, b.model_name,
          "registered model name, or auto (config.json's model_type)",
          [](RuntimeConfig& c, const json& v) { bb_of(c).model_name = v; }));
  add(key("backend.impl", "backend", T::String, b.impl, "implementation of the model in the registry",
          [](RuntimeConfig& c, const json& v) { bb_of(c).impl = v; }));
  add(key("backend.device", "backend", T::String, b.device, "cpu | cuda | cuda:N (under MPI: cuda:local_rank)",
          [](RuntimeConfig& c, const json& v) { bb_of(c).device = v; }));
  add(key("backend.dtype", "backend", T::String, b.dtype,
          "compute dtype; auto: float32 on cpu, bfloat16 on cuda, float64 for backend=ref",
          [](RuntimeConfig& c, const json& v) { bb_of(c).dtype = v; })
          .one_of({"auto", "float64", "float32", "bfloat16"}));
  add(key("backend.recompute", "backend", T::String, b.recompute,
          "activation recompute; selective: parts of each layer (backend.recompute_modules), full: whole layers",
          [](RuntimeConfig& c, const json& v) { bb_of(c).recompute = v; })
          .one_of({"none", "selective", "full"}));
  add(key("backend.recompute_modules", "backend", T::String, b.recompute_modules,
          "selective recompute: comma list of core_attn (attention output), layernorm (the outputs of the "
          "input and pre-MLP norms, and of the q/k or MLA q_a/kv_a norms), mlp (the SwiGLU activation, "
          "dense and experts), moe (the whole MoE block); empty: core_attn",
          [](RuntimeConfig& c, const json& v) { bb_of(c).recompute_modules = v; }));
  add(key("backend.recompute_method", "backend", T::String, b.recompute_method,
          "block: recompute the first recompute_num_layers layers of each pipeline chunk; "
          "uniform (full only): every layer, in runs of recompute_num_layers that keep only their input",
          [](RuntimeConfig& c, const json& v) { bb_of(c).recompute_method = v; })
          .one_of({"block", "uniform"}));
  add(int_key("backend.recompute_num_layers", "backend", b.recompute_num_layers,
              "layers per chunk that recompute applies to (block; 0: all) or the run length (uniform)",
              [](RuntimeConfig& c, const json& v) { bb_of(c).recompute_num_layers = v; })
          .at_least(0));
  add(key("backend.fp32_residual_connection", "backend", T::Bool, b.fp32_residual_connection,
          "keep the residual stream in float32 under bfloat16 activations",
          [](RuntimeConfig& c, const json& v) { bb_of(c).fp32_residual_connection = v; }));
  add(key("backend.load_hf_weights", "backend", T::Bool, b.load_hf_weights,
          "load the safetensors of hf_path; false: random init from config.json alone",
          [](RuntimeConfig& c, const json& v) { bb_of(c).load_hf_weights = v; }));
  add(key("backend.seed", "backend", T::Int, b.seed, "random seed: parameter init and the tool's random data",
          [](RuntimeConfig& c, const json& v) { bb_of(c).seed = uint64_t(v.get<int64_t>()); })
          .at_least(0));
  add(key("backend.temperature", "backend", T::Float, b.temperature, "logits are divided by it (loss, log-probs)",
          [](RuntimeConfig& c, const json& v) { bb_of(c).temperature = v; })
          .above(0.0));
  add(int_key("backend.lm_head_chunk_tokens", "backend", b.lm_head_chunk_tokens,
              "tokens per LM-head chunk (their logits [chunk, vocab/tp] exist one chunk at a time); "
              "0: the fewest chunks of at most 2^30 logits, split evenly",
              [](RuntimeConfig& c, const json& v) { bb_of(c).lm_head_chunk_tokens = v; })
          .at_least(0));
  add(key("backend.attention_backend", "backend", T::String, b.attention_backend,
          "CUDA fused attention; auto: per call the faster where both run (ours on sm_90 for every forward "
          "and the hd 64 / 128 backward, cudnn elsewhere), flash in a build without cuDNN; "
          "the environment variable BB_ATTENTION_BACKEND overrides it",
          [](RuntimeConfig& c, const json& v) { bb_of(c).attention_backend = v; })
          .one_of({"auto", "cudnn", "flash"}));
  add(key("backend.deterministic", "backend", T::Bool, b.deterministic,
          "CUDA ops sum in a fixed order, so identical runs repeat bitwise at the same layout (Megatron's "
          "--deterministic-mode); needs attention_backend cudnn (or auto with cuDNN) for training",
          [](RuntimeConfig& c, const json& v) { bb_of(c).deterministic = v; }));
  add(key("backend.router_aux_loss_coef", "backend", T::Float, json(),
          "MoE models: weight of the router load-balancing loss; unset (null): config.json's router_aux_loss_coef",
          [](RuntimeConfig& c, const json& v) {
            bb_of(c).router_aux_loss_coef = v.is_null() ? std::optional<double>() : std::optional<double>(v.get<double>());
          })
          .in_float_range(0.0, kInf));
  add(key("backend.mtp_loss_scaling_factor", "backend", T::Float, json(),
          "multi-token prediction (deepseek_v3 with num_nextn_predict_layers > 0): weight of the MTP loss, the loss "
          "adding factor / depths x sum of the depths' losses; unset (null): the model's default 0.1",
          [](RuntimeConfig& c, const json& v) {
            bb_of(c).mtp_loss_scaling_factor =
                v.is_null() ? std::optional<double>() : std::optional<double>(v.get<double>());
          })
          .in_float_range(0.0, kInf));
  add(key("backend.frozen_params", "backend", T::String, b.frozen_params,
          "regular expression over HF parameter names to freeze (no gradient, no optimizer state); empty: none",
          [](RuntimeConfig& c, const json& v) { bb_of(c).frozen_params = v; }));
  add(key("peft.type", "peft", T::String, b.peft.type,
          "parameter-efficient fine-tuning (docs/peft.md): lora trains adapters on peft.target_modules with every "
          "other parameter frozen; dora adds peft's magnitude vector (use_dora); none trains the model itself",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.type = v; })
          .one_of({"none", "lora", "dora"}));
  add(key("peft.target_modules", "peft", T::String, b.peft.target_modules,
          "comma list of HF linear modules to adapt (q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj) or "
          "all-linear; HF peft's target_modules",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.target_modules = v; }));
  add(key("peft.target_parameters", "peft", T::String, b.peft.target_parameters,
          "comma list of fused MoE expert weights to adapt (mlp.experts.gate_up_proj,mlp.experts.down_proj); HF "
          "peft's target_parameters; empty: none",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.target_parameters = v; }));
  add(int_key("peft.rank", "peft", b.peft.rank, "LoRA rank r (HF peft's r)",
              [](RuntimeConfig& c, const json& v) { bb_of(c).peft.rank = v; })
          .at_least(1));
  add(key("peft.alpha", "peft", T::Float, b.peft.alpha, "LoRA alpha (HF peft's lora_alpha): scaling alpha / r",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.alpha = v; })
          .above(0.0));
  add(key("peft.dropout", "peft", T::Float, b.peft.dropout, "dropout on the adapter input (HF peft's lora_dropout); not with dora or peft.target_parameters",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.dropout = v; })
          .in_float_range(0.0, 1.0));
  add(key("peft.use_rslora", "peft", T::Bool, b.peft.use_rslora, "rank-stabilised scaling alpha / sqrt(r)",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.use_rslora = v; }));
  add(key("peft.adapter_path", "peft", T::String, b.peft.adapter_path,
          "HF peft adapter directory to continue training (its r, lora_alpha, use_rslora must match); empty: fresh "
          "adapters (B = 0)",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.adapter_path = v; }));
  add(key("peft.merge_on_export", "peft", T::Bool, b.peft.merge_on_export,
          "HF export writes the merged weights W + scaling * B A (float64 on the host) instead of the base weights",
          [](RuntimeConfig& c, const json& v) { bb_of(c).peft.merge_on_export = v; }));
  add(key("backend.impl_cfg", "backend", T::Json, b.impl_cfg, "model-specific implementation keys, a JSON object",
          [](RuntimeConfig& c, const json& v) { bb_of(c).impl_cfg = v; }));
  add(key("backend.model_overrides", "backend", T::Json, b.model_overrides,
          "model config overrides, e.g. {\"num_layers\": 2}",
          [](RuntimeConfig& c, const json& v) { bb_of(c).model_overrides = v; }));

  add(int_key("backend.parallel.tp", "backend.parallel", p.tp, "tensor-parallel size (dp = world / (tp * cp * pp))",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).tp = v; })
          .at_least(1));
  add(int_key("backend.parallel.etp", "backend.parallel", p.etp, "expert tensor-parallel size (0: same as tp)",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).etp = v; })
          .at_least(0));
  add(int_key("backend.parallel.ep", "backend.parallel", p.ep, "expert-parallel size",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).ep = v; })
          .at_least(1));
  add(int_key("backend.parallel.pp", "backend.parallel", p.pp, "pipeline-parallel size",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).pp = v; })
          .at_least(1));
  add(int_key("backend.parallel.vpp", "backend.parallel", p.vpp, "virtual pipeline chunks per stage",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).vpp = v; })
          .at_least(1));
  add(int_key("backend.parallel.cp", "backend.parallel", p.cp, "context-parallel size",
              [](RuntimeConfig& c, const json& v) { parallel_of(c).cp = v; })
          .at_least(1));
  add(key("backend.parallel.pp_layout", "backend.parallel", T::String, p.pp_layout,
          "pipeline stage layout, e.g. E|t*5|t*6|t,L: E embedding, t*N layers, L loss head (empty: balanced)",
          [](RuntimeConfig& c, const json& v) { parallel_of(c).pp_layout = v; }));

  add(key("export.bucket_bytes", "export", T::String, "2GiB",
          "export: host bytes a pipeline stage sends to the writing rank at a time (e.g. 2GiB, 512MB)",
          [](RuntimeConfig& c, const json& v) { c.export_cfg.bucket_bytes = byte_size("export.bucket_bytes", v); }));
  add(key("export.max_shard_bytes", "export", T::String, "5GB",
          "export: safetensors shard size limit, as HF's max_shard_size (e.g. 5GB, 100MiB)",
          [](RuntimeConfig& c, const json& v) { c.export_cfg.max_shard_bytes = byte_size("export.max_shard_bytes", v); }));
  add(key("export.dtype", "export", T::String, d.export_cfg.dtype,
          "export: dtype of the written tensors; source: each tensor's dtype in hf_path (param when it has none)",
          [](RuntimeConfig& c, const json& v) { c.export_cfg.dtype = v; })
          .one_of({"source", "bf16", "fp32", "param"}));

  const std::string g = "optimizer";
  add(key("optimizer.optimizer", g, T::String, o.optimizer, "AdamW with decoupled weight decay; adam and adamw both name it",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).optimizer = v; })
          .one_of({"adam", "adamw"}));
  add(key("optimizer.lr", g, T::Float, o.lr, "peak learning rate",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr = v; })
          .in_float_range(0.0, kInf));
  add(key("optimizer.min_lr", g, T::Float, o.min_lr, "learning rate at the end of the decay",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).min_lr = v; })
          .in_float_range(0.0, kInf));
  add(key("optimizer.clip_grad", g, T::Float, o.clip_grad, "global gradient-norm clip (0: none)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).clip_grad = v; })
          .in_float_range(0.0, kInf));
  add(key("optimizer.weight_decay", g, T::Float, o.weight_decay, "decoupled weight decay",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).weight_decay = v; })
          .in_float_range(0.0, kInf));
  add(key("optimizer.no_weight_decay_1d", g, T::Bool, o.no_weight_decay_1d,
          "no weight decay on 1-D parameters (norm weights, biases), as Megatron",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).no_weight_decay_1d = v; }));
  add(key("optimizer.lr_warmup_steps", g, T::Int, o.lr_warmup_steps, "linear warmup steps",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_warmup_steps = v; })
          .at_least(0));
  add(key("optimizer.lr_warmup_init", g, T::Float, o.lr_warmup_init, "learning rate at step 0 of the warmup",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_warmup_init = v; })
          .in_float_range(0.0, kInf));
  add(key("optimizer.lr_decay_steps", g, T::Int, o.lr_decay_steps, "step where the decay ends (0: total_training_steps)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_decay_steps = v; })
          .at_least(0));
  add(key("optimizer.lr_decay_style", g, T::String, o.lr_decay_style, "learning-rate decay after the warmup",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_decay_style = v; })
          .one_of({"constant", "linear", "cosine", "WSD"}));
  add(key("optimizer.lr_wsd_decay_style", g, T::String, o.lr_wsd_decay_style, "shape of the WSD tail",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_wsd_decay_style = v; })
          .one_of({"linear", "cosine", "exponential"}));
  add(key("optimizer.lr_wsd_decay_steps", g, T::Int, o.lr_wsd_decay_steps, "length of the WSD tail",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).lr_wsd_decay_steps = v; })
          .at_least(0));
  add(key("optimizer.total_training_steps", g, T::Int, o.total_training_steps,
          "decay horizon (bb-train: 0 means train.steps)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).total_training_steps = v; })
          .at_least(0));
  add(key("optimizer.adam_beta1", g, T::Float, o.adam_beta1, "Adam beta1",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).adam_beta1 = v; })
          .in_float_range(0.0, 1.0));
  add(key("optimizer.adam_beta2", g, T::Float, o.adam_beta2, "Adam beta2",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).adam_beta2 = v; })
          .in_float_range(0.0, 1.0));
  add(key("optimizer.adam_eps", g, T::Float, o.adam_eps, "Adam epsilon",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).adam_eps = v; })
          .above(0.0));
  add(key("optimizer.offload_fraction", g, T::Float, o.offload_fraction,
          "fraction of the optimizer state (fp32 master, Adam moments) kept and stepped on the host",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).offload_fraction = v; })
          .in_float_range(0.0, 1.0));
  add(key("optimizer.exp_avg_dtype", g, T::String, o.exp_avg_dtype,
          "storage dtype of Adam's first moment (AdamW computes in fp32 and rounds on store)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).exp_avg_dtype = v; })
          .one_of({"fp32", "bf16"}));
  add(key("optimizer.exp_avg_sq_dtype", g, T::String, o.exp_avg_sq_dtype,
          "storage dtype of Adam's second moment (AdamW computes in fp32 and rounds on store)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).exp_avg_sq_dtype = v; })
          .one_of({"fp32", "bf16"}));
  add(key("optimizer.main_grads_dtype", g, T::String, o.main_grads_dtype,
          "dtype of the gradient buffers backward accumulates into and dp reduce-scatters",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).main_grads_dtype = v; })
          .one_of({"fp32", "bf16"}));
  add(key("optimizer.main_params_dtype", g, T::String, o.main_params_dtype,
          "fp32: an fp32 master copy of the bf16 weights; bf16: AdamW updates the bf16 weights in place",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).main_params_dtype = v; })
          .one_of({"fp32", "bf16"}));
  add(key("optimizer.grad_bucket_size", g, T::Int, o.grad_bucket_size,
          "elements per data-parallel gradient bucket (its reduce-scatter overlaps backward)",
          [](RuntimeConfig& c, const json& v) { optimizer_of(c).grad_bucket_size = v; })
          .at_least(1));
}

}  // namespace bb
