// Runtime: model construction and the training calls.
#include "bumblebee/runtime/runtime.h"

#include <filesystem>
#include <fstream>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/input_file.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/model/plugin.h"
#include "bumblebee/model/registry.h"
#include "bumblebee/ops/attention_backend.h"
#include "bumblebee/ops/deterministic.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/primitive/ckpt/peft_adapter.h"
#include "bumblebee/primitive/modules/lora_dropout.h"
#include "bumblebee/primitive/modules/moe/router_replay.h"
#include "bumblebee/primitive/modules/rmsnorm.h"
#include "bumblebee/primitive/optim/param_groups.h"
#include "bumblebee/runtime/microbatch.h"
#include "bumblebee/runtime/model_state.h"
#include "bumblebee/runtime/peft.h"
#include "bumblebee/runtime/pipeline_transfer.h"
#include "bumblebee/runtime/schedule.h"

namespace bb {

// ---- ModelHandle ------------------------------------------------------------------
ModelState& ModelHandle::state() const {
  BB_CHECK(state_, "ModelHandle is empty: call Runtime::build_model() first");
  return *state_;
}
int ModelHandle::dp_rank() const { return state().parallel->dp_rank(); }
int ModelHandle::dp_size() const { return state().parallel->dp_size(); }
dist::Communicator& ModelHandle::dp_group() const { return state().parallel->dp(); }
const nlohmann::json& ModelHandle::config() const { return state().chunks.front()->config(); }
ModelChunk& ModelHandle::model() const { return *state().chunks.front(); }
std::vector<ModelChunk*> ModelHandle::chunks() const {
  std::vector<ModelChunk*> out;
  for (auto& c : state().chunks) out.push_back(c.get());
  return out;
}
DistributedOptimizer& ModelHandle::optimizer() const { return *state().optimizer; }

ModeGuard::ModeGuard(ModelState& s, bool training) : state_(&s), previous_(s.training) { s.training = training; }
ModeGuard::~ModeGuard() { state_->training = previous_; }

// ---- Runtime ----------------------------------------------------------------------
namespace {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f = open_input_file(path, "model config");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    BB_FAIL(path, " is not valid JSON: ", e.what());
  }
}

DType resolve_dtype(const std::string& name, Device dev) {
  if (name == "auto") return dev.is_cuda() ? DType::BF16 : DType::F32;
  const DType dt = dtype_from_name(name);
  if (dev.is_cpu())
    BB_CHECK(dt == DType::F32 || dt == DType::F64, "dtype ", name, " is not supported on the CPU backend (float32 or float64)");
  else
    BB_CHECK(dt == DType::BF16, "dtype ", name, " is not supported on the CUDA backend (bfloat16 with fp32 master weights)");
  return dt;
}

// Router replay's input, checked before the step's first collective; the dp
// ranks agree on the outcome so a bad batch on one of them fails them all
// (the ranks of one dp rank's tp, pp and ep groups hold the same batch).
void check_router_replay(const PackedBatch& data, RouterReplayMode mode, const ModelChunk::RouterShape& shape,
                         int cp) {
  BB_CHECK(shape.moe_layers > 0, "router_replay = ", data.router_replay, " needs a model with MoE layers");
  // Replay's routes are per token of the whole microbatch; cp would need them in each rank's zigzag order.
  BB_CHECK(cp == 1, "router replay needs backend.parallel.cp = 1 (routes are recorded per token of whole "
           "sequences, not split in the zigzag order of context parallelism), got cp = ", cp);
  if (mode == RouterReplayMode::Record) return;
  check_routed_experts(data.routed_experts, data.total_tokens(), shape.moe_layers, shape.top_k, shape.num_experts);
}

void check_backend(const RuntimeConfig& cfg) {
  const std::string& b = cfg.backend;
  BB_CHECK(b == "bb" || b == "ref", "unknown backend '", b, "' (expected bb or ref)");
  const ParallelConfig& p = cfg.backend_cfg.parallel;
  for (auto [v, name] : {std::pair{p.tp, "tp"}, {p.pp, "pp"}, {p.cp, "cp"}, {p.ep, "ep"}, {p.vpp, "vpp"}})
    BB_CHECK(v >= 1, "backend.parallel.", name, " must be >= 1, got ", v);
  BB_CHECK(p.etp >= 0, "backend.parallel.etp must be >= 0 (0: same as tp), got ", p.etp);
  if (b == "ref") {
    BB_CHECK(p.tp == 1 && p.cp == 1, "backend=ref runs on one rank; backend.parallel.tp (", p.tp, ") and cp (", p.cp,
             ") must be 1");
    BB_CHECK(Device::parse(cfg.backend_cfg.device).is_cpu(), "backend=ref runs on the CPU; use backend=bb for device=",
             cfg.backend_cfg.device);
  }
  const std::string& opt = cfg.backend_cfg.optimizer.optimizer;
  BB_CHECK(opt == "adam" || opt == "adamw", "unknown optimizer '", opt, "' (expected adam)");
}

// The activations passed between pipeline stages.
PipelineShapes pipeline_shapes(ModelState& st, int64_t tp, Device dev) {
  ModelChunk& model = *st.chunks.front();
  PipelineShapes shapes;
  shapes.hidden_size = model.config().at("hidden_size").get<int64_t>();
  shapes.tp = tp;
  shapes.device = dev;
  shapes.dtype = model.params().param_dtype();   // the residual stream's dtype (BuildContext::residual_dtype)
  if (st.cfg.fp32_residual_connection && shapes.dtype == DType::BF16) shapes.dtype = DType::F32;
  return shapes;
}

}  // namespace

Runtime::Runtime(const RuntimeConfig& cfg) : cfg_(cfg) {
  check_backend(cfg_);
  for (const std::string& plugin : cfg_.plugins) load_plugin(plugin);
  dist::World& world = dist::World::instance();
  if (cfg_.backend == "ref")
    BB_CHECK(world.size() == 1, "backend=ref runs on one rank, but ", world.size(), " ranks were launched");
  const ParallelConfig& p = cfg_.backend_cfg.parallel;
  dist::GroupSizes sizes;
  sizes.tp = p.tp;
  sizes.cp = p.cp;
  sizes.ep = p.ep;
  sizes.etp = p.etp;
  sizes.pp = p.pp;
  parallel_ = dist::ParallelState::create(world, sizes);
  device_ = Device::parse(cfg_.backend_cfg.device);
  if (device_.is_cuda()) {
    BB_CHECK(cuda_built(), "device=", cfg_.backend_cfg.device,
             " was requested but this Bumblebee build has no CUDA backend (configure found no CUDA toolkit)");
    const int n = cuda_device_count();
    BB_CHECK(n > 0, "device=", cfg_.backend_cfg.device, " was requested but no CUDA GPU is visible");
    if (world.size() > 1 && cfg_.backend_cfg.device == "cuda") device_ = Device::cuda(world.local_rank() % n);
    BB_CHECK(device_.index < n, "device cuda:", device_.index, " does not exist (", n, " GPUs visible)");
    device_make_current(device_);
  }
}

std::unique_ptr<Runtime> create_runtime(const RuntimeConfig& cfg) { return std::make_unique<Runtime>(cfg); }

ModelHandle Runtime::build_model() { return build_model(cfg_.backend_cfg); }

ModelHandle Runtime::build_model(const BBConfig& bcfg) {
  auto st = std::make_shared<ModelState>();
  st->cfg = bcfg;
  st->parallel = parallel_;
  BB_CHECK(!cfg_.hf_path.empty(), "hf_path is empty: give the HF model directory holding config.json");
  const std::string config_path = cfg_.hf_path + "/config.json";
  BB_CHECK(std::filesystem::exists(config_path), "no config.json in hf_path ", cfg_.hf_path);
  st->hf_config = read_json_file(config_path);
  BB_CHECK(st->hf_config.is_object(), config_path, ": not a JSON object");
  const auto type_it = st->hf_config.find("model_type");
  const bool typed = type_it != st->hf_config.end() && !type_it->is_null();
  BB_CHECK(!typed || type_it->is_string(), config_path, ": 'model_type' = ", type_it->dump(), ": must be a string");
  const std::string model_type = typed ? type_it->get<std::string>() : std::string();
  st->protocol = resolve_model(bcfg.model_name, bcfg.impl, model_type);
  // Model packages parse json, not files: the file's path is added here.
  nlohmann::json overrides = bcfg.model_overrides;
  if (bcfg.router_aux_loss_coef) overrides["router_aux_loss_coef"] = *bcfg.router_aux_loss_coef;
  if (bcfg.mtp_loss_scaling_factor) overrides["mtp_loss_scaling_factor"] = *bcfg.mtp_loss_scaling_factor;
  nlohmann::json model_cfg;
  try {
    model_cfg = st->protocol->build_model_config(st->hf_config, overrides);
  } catch (const Error& e) {
    throw Error(config_path + ": " + e.what());
  }
  st->context = std::make_shared<ParallelContext>(parallel_);

  BuildContext ctx;
  ctx.parallel = st->context;
  ctx.device = device_;
  ctx.dtype = resolve_dtype(cfg_.backend == "ref" && bcfg.dtype == "auto" ? "float64" : bcfg.dtype, device_);
  // bf16 gradient buffers (torchtitan's and Megatron's --main-grads-dtype
  // bf16): every weight-gradient backward adds its fp32 result into the
  // bf16 buffer and rounds once per accumulation (docs/training.md).
  const bool bf16_grads = bcfg.optimizer.main_grads_dtype == "bf16";
  BB_CHECK(!bf16_grads || ctx.dtype == DType::BF16, "optimizer.main_grads_dtype=bf16 needs bf16 parameters, but ",
           "they are ", dtype_name(ctx.dtype), " (the float32/float64 paths keep their gradients in the parameter dtype)");
  ctx.grad_dtype = ctx.dtype == DType::BF16 && !bf16_grads ? DType::F32 : ctx.dtype;
  ctx.residual_dtype = bcfg.fp32_residual_connection && ctx.dtype == DType::BF16 ? DType::F32 : ctx.dtype;
  ctx.recompute = parse_recompute(bcfg.recompute, bcfg.recompute_modules, bcfg.recompute_method,
                                  bcfg.recompute_num_layers);
  ctx.impl_cfg = bcfg.impl_cfg;
  ctx.temperature = bcfg.temperature;
  ctx.lm_head_chunk_tokens = bcfg.lm_head_chunk_tokens;
  ops::set_attention_backend(bcfg.attention_backend);
  ops::set_deterministic(bcfg.deterministic);
  ParamGroupOptions groups;
  groups.no_weight_decay_1d = bcfg.optimizer.no_weight_decay_1d;
  if (!bcfg.frozen_params.empty()) groups.frozen = {bcfg.frozen_params};
  ctx.lora = make_lora_config(bcfg.peft);
  // PEFT trains the adapters only: everything else joins the frozen group.
  if (ctx.lora) groups.frozen.push_back("(?!.*\\.(lora_[AB]\\.weight|lora_magnitude_vector)$).*");
  ctx.param_groups = make_param_groups(*parallel_, groups);
  BB_CHECK(bcfg.optimizer.grad_bucket_size > 0, "optimizer.grad_bucket_size must be > 0, got ",
           bcfg.optimizer.grad_bucket_size);
  ctx.grad_bucket_size = bcfg.optimizer.grad_bucket_size;
  // One chunk per virtual stage of this rank; pp = 1 builds the whole model.
  const ParallelConfig& pc = bcfg.parallel;
  const bool pipelined = pc.pp > 1 || pc.vpp > 1 || !pc.pp_layout.empty();
  if (pipelined) {
    BB_CHECK(model_cfg.contains("num_layers") && model_cfg.contains("hidden_size"), "pipeline parallelism needs ",
             "the model config's num_layers and hidden_size; model '", model_cfg.value("model_type", std::string("?")),
             "' has none");
    st->layout = make_pipeline_layout(pc.pp_layout, model_cfg.at("num_layers").get<int64_t>(), pc.pp, pc.vpp,
                                      model_cfg.value("num_nextn_predict_layers", int64_t(0)));
  } else {
    st->layout.pieces = {LayerRange{}};
  }
  for (int v = 0; v < st->layout.vpp; ++v) {
    ctx.layers = st->layout.piece(parallel_->pp_rank(), v);
    if (ctx.layers.pre_process && ctx.layers.post_process) ctx.layers = LayerRange{};
    st->chunks.push_back(st->protocol->build_model(model_cfg, ctx));
  }
  if (pipelined)
    BB_CHECK(!st->chunks.front()->router_shape().aux_loss_couples_layers,
             "the hf form of the router auxiliary loss couples every layer, which pp > 1 splits over stages; set "
             "backend.model_overrides {\"moe_aux_loss_type\": \"megatron\"} (per layer) or "
             "{\"output_router_logits\": false}");
  // Megatron runs dense layers under ep as a no-op; here it is an error so a
  // layout that cannot shard anything is not mistaken for one that does.
  if (bcfg.parallel.ep > 1) {
    bool experts = false;
    for (auto& chunk : st->chunks)
      for (const Parameter& prm : chunk->params().params()) experts = experts || prm.cls == ParamClass::Expert;
    experts = parallel_->pp().all_reduce_scalar(experts ? 1.0 : 0.0) > 0;
    BB_CHECK(experts, "backend.parallel.ep = ", bcfg.parallel.ep, " > 1 needs a model with experts; model '",
             model_cfg.value("model_type", std::string("?")), "' has none");
  }
  if (bcfg.parallel.cp > 1) {
    // Routing per token runs under cp as the dense layers do; router losses
    // or an expert capacity over the whole microbatch would see only this
    // rank's chunks of it.
    for (auto& chunk : st->chunks)
      BB_CHECK(!chunk->router_shape().microbatch_statistics, "backend.parallel.cp = ", bcfg.parallel.cp,
               " > 1 splits each microbatch, but model '", model_cfg.value("model_type", std::string("?")),
               "' has router statistics over the whole microbatch (a load-balancing loss, the z-loss or an expert "
               "capacity); turn them off or use cp = 1");
  }
  // Each chunk loads only its own tensors; a tied embedding's copy on the
  // last stage loads (or initialises) to the same values as the first stage's.
  if (bcfg.load_hf_weights) {
    const HFCheckpoint ckpt = HFCheckpoint::open(cfg_.hf_path);
    for (auto& chunk : st->chunks) {
      st->protocol->load_hf_weights(*chunk, ckpt);
      init_lora_params(chunk->params(), bcfg.seed);
    }
  } else {
    for (auto& chunk : st->chunks) chunk->init_weights(bcfg.seed);
  }
  for (auto& chunk : st->chunks) init_dora_magnitudes(chunk->params(), st->context->tp());
  if (ctx.lora)
    for (auto& chunk : st->chunks) check_lora_targets_found(*ctx.lora, chunk->params(), chunk->layers());
  if (!bcfg.peft.adapter_path.empty()) {
    BB_CHECK(ctx.lora, "peft.adapter_path is set but peft.type=none; set peft.type=lora (or dora) to continue an adapter");
    for (auto& chunk : st->chunks) load_peft_adapter(chunk->params(), bcfg.peft.adapter_path, *ctx.lora, chunk->layers());
  }

  const OptimizerConfig& o = bcfg.optimizer;
  BB_CHECK(o.offload_fraction >= 0.0 && o.offload_fraction <= 1.0, "optimizer.offload_fraction must lie in [0, 1], got ",
           o.offload_fraction);
  AdamWConfig ac;
  ac.beta1 = o.adam_beta1;
  ac.beta2 = o.adam_beta2;
  ac.eps = o.adam_eps;
  ac.weight_decay = o.weight_decay;
  ac.clip_grad = o.clip_grad;
  ac.offload_fraction = o.offload_fraction;
  ac.bf16_exp_avg = o.exp_avg_dtype == "bf16";
  ac.bf16_exp_avg_sq = o.exp_avg_sq_dtype == "bf16";
  ac.bf16_main_params = o.main_params_dtype == "bf16";
  std::vector<ParamStore*> stores;
  std::vector<const Parameter*> tied_copies;   // counted in the grad norm by the first stage
  for (auto& chunk : st->chunks) {
    stores.push_back(&chunk->params());
    if (!chunk->is_first_stage())
      for (const Parameter* t : chunk->tied_params()) tied_copies.push_back(t);
  }
  st->optimizer = std::make_unique<DistributedOptimizer>(stores, *parallel_, ac, tied_copies);
  LRScheduleConfig lc;
  lc.lr = o.lr;
  lc.min_lr = o.min_lr;
  lc.warmup_steps = o.lr_warmup_steps;
  lc.warmup_init = o.lr_warmup_init;
  lc.decay_steps = o.lr_decay_steps ? o.lr_decay_steps : o.total_training_steps;
  lc.decay_style = o.lr_decay_style;
  lc.wsd_decay_style = o.lr_wsd_decay_style;
  lc.wsd_decay_steps = o.lr_wsd_decay_steps;
  st->schedule = std::make_unique<LRSchedule>(lc);
  return ModelHandle(st);
}

std::unique_ptr<ModeGuard> Runtime::train_mode(ModelHandle& h) { return std::make_unique<ModeGuard>(h.state(), true); }
std::unique_ptr<ModeGuard> Runtime::eval_mode(ModelHandle& h) { return std::make_unique<ModeGuard>(h.state(), false); }

void Runtime::to(ModelHandle& h, Device target, const OffloadParts& parts) {
  ModelState& st = h.state();
  BB_CHECK(target.is_cpu() || target == device_, "Runtime::to: target ", target.str(),
           " is neither the host (cpu) nor this runtime's device (", device_.str(), ")");
  if (device_.is_cpu()) return;
  if (target.is_cpu())
    offload_to_host(st, parts, device_);
  else
    reload_to_device(st, parts, device_);
}

void Runtime::zero_grad(ModelHandle& h) {
  check_on_device(h.state(), OffloadParts{false, false, true}, "zero_grad");
  h.optimizer().invalidate_grads();
  for (ModelChunk* c : h.chunks()) c->params().zero_grads();
}

ForwardResult Runtime::forward_backward(ModelHandle& h, const PackedBatch& data, const LossFn& loss_fn,
                                        int num_microbatches, bool forward_only, bool calculate_entropy) {
  ModelState& st = h.state();
  forward_only = forward_only || !st.training;
  check_on_device(st, OffloadParts{true, false, !forward_only}, "forward_backward");
  ModelChunk& model = *st.chunks.front();
  const bool pipelined = parallel_->pp_size() > 1;
  const DType loss_dt = stat_dtype(model.params().param_dtype());
  const bool host_outputs = bool(loss_fn) || forward_only;
  const ContextSplit cp{parallel_->cp_size(), parallel_->cp_rank()};
  const RouterReplayMode replay = parse_router_replay(data.router_replay);
  const ModelChunk::RouterShape router_shape = model.router_shape();
  if (replay != RouterReplayMode::Off) {
    std::string bad;
    try {
      check_router_replay(data, replay, router_shape, cp.size);
    } catch (const Error& e) {
      bad = e.what();
    }
    const bool any_bad = parallel_->dp().all_reduce_scalar(bad.empty() ? 0.0 : 1.0) > 0;
    BB_CHECK(!any_bad, bad.empty() ? std::string("router replay: another data-parallel rank's batch was rejected") : bad);
  }
  const std::vector<PackedBatch> mbs = split_microbatches(data, num_microbatches);
  std::vector<PreparedMicroBatch> prepared;
  double local_tokens = 0;
  for (const PackedBatch& mb : mbs) {
    prepared.push_back(prepare_microbatch(mb, model.vocab_size(), parallel_->tp_size(), device_, loss_dt, cp));
    PreparedMicroBatch& pm = prepared.back();
    pm.device.calculate_entropy = calculate_entropy && host_outputs;
    local_tokens += pm.microbatch_loss_tokens;
    if (replay == RouterReplayMode::Off) continue;
    pm.router_replay = std::make_shared<RouterReplay>(replay, mb.routed_experts, pm.real_tokens,
                                                      router_shape.moe_layers, router_shape.top_k,
                                                      router_shape.num_experts);
    pm.device.seq.router_replay = pm.router_replay.get();
  }
  // The built-in loss is the mean over every loss token of the global batch,
  // so any split over microbatches and dp ranks gives the same gradients. The
  // cp ranks of a dp rank share its microbatches, which count once.
  const double global_tokens = parallel_->dp().all_reduce_scalar(local_tokens);
  for (PreparedMicroBatch& pm : prepared)
    pm.device.aux_loss_weight = global_tokens > 0 ? pm.loss_tokens / global_tokens : 0.0;
  if (!forward_only && st.cfg.peft.type != "none" && st.cfg.peft.dropout > 0.0) {
    for (PreparedMicroBatch& pm : prepared)
      pm.device.seq.lora_dropout = {true, lora_dropout_key(st.cfg.seed, st.optimizer->steps_taken(),
                                                           st.microbatches_this_step++, parallel_->dp_rank(),
                                                           parallel_->cp_rank())};
  }

  ForwardResult result;
  result.num_tokens = int64_t(global_tokens);
  result.model_output.resize(mbs.size());
  // The built-in loss: each microbatch's masked loss sum stays on the device
  // until the one host read after the schedule. A custom loss (and a
  // forward-only call, which returns per-token log-probs) reads each
  // microbatch's per-token loss on the host.
  Tensor loss_sums = Tensor::zeros({int64_t(mbs.size())}, DType::F64, device_);
  double local_loss_sum = 0;
  ScheduleHooks hooks;
  hooks.fused_dloss = [&](size_t i) -> Tensor {
    if (loss_fn) return Tensor();
    Tensor d = prepared[i].device_loss_mask.clone();
    ops::scale_(d, global_tokens > 0 ? 1.0 / global_tokens : 0.0);
    return d;
  };
  hooks.loss = [&](size_t i, const Tensor& token_loss, const Tensor& entropy) -> ScheduleHooks::LossGrads {
    PreparedMicroBatch& pm = prepared[i];
    if (!host_outputs) {
      Tensor slot = loss_sums.narrow(i, 1);
      ops::dot(token_loss, pm.device_loss_mask, slot);
      return {};
    }
    const std::vector<double> tl = token_loss.to_doubles();
    const std::vector<double> ent = entropy.defined() ? entropy.to_doubles() : std::vector<double>();
    ModelOutputs& out = result.model_output[i];
    // The log-probs, token losses (and entropies) in the microbatch's token
    // order. Under cp each rank holds its zigzag chunks: it fills in its own
    // tokens, and the sum over cp (each token on one rank, zeros elsewhere)
    // has them all.
    const size_t T = size_t(pm.real_tokens);
    const size_t fields = ent.empty() ? 2 : 3;
    std::vector<double> per_token(fields * T, 0.0);
    for (size_t p = 0; p < pm.token_index.size(); ++p) {
      const int64_t t = pm.token_index[p];
      if (t < 0 || !pm.has_label[p]) continue;
      per_token[size_t(t)] = -tl[p];
      per_token[T + size_t(t)] = pm.loss_mask[p] * tl[p];
      if (!ent.empty()) per_token[2 * T + size_t(t)] = ent[p];
    }
    if (cp.size > 1) {
      Tensor gathered = Tensor::from_doubles(per_token, {int64_t(fields * T)}, DType::F64).to(device_);
      parallel_->cp().all_reduce(gathered);
      per_token = gathered.to_doubles();
    }
    const auto field = [&](size_t k) {
      return std::vector<double>(per_token.begin() + std::ptrdiff_t(k * T), per_token.begin() + std::ptrdiff_t((k + 1) * T));
    };
    out.log_probs = field(0);
    out.token_loss = field(1);
    if (!ent.empty()) out.entropy = field(2);
    double mb_loss_sum = 0;
    for (double l : out.token_loss) mb_loss_sum += l;
    if (!loss_fn) {
      out.loss = pm.microbatch_loss_tokens > 0 ? mb_loss_sum / pm.microbatch_loss_tokens : 0.0;
      result.metrics["loss"].push_back(out.loss);
      local_loss_sum += mb_loss_sum;
      return {};
    }
    LossOutput lo = loss_fn(out, mbs[i]);
    out.loss = lo.loss;
    for (const auto& [k, v] : lo.metrics) result.metrics[k].push_back(v);
    result.metrics["loss"].push_back(lo.loss);
    local_loss_sum += lo.loss;
    if (forward_only) return {};
    BB_CHECK(int64_t(lo.grad_log_probs.size()) == pm.real_tokens, "loss_fn returned ", lo.grad_log_probs.size(),
             " log-prob gradients for a microbatch of ", pm.real_tokens, " tokens");
    BB_CHECK(lo.grad_entropy.empty() || ent.size() > 0, "loss_fn returned entropy gradients, but forward_backward ",
             "was not asked to calculate the entropy (calculate_entropy)");
    BB_CHECK(lo.grad_entropy.empty() || int64_t(lo.grad_entropy.size()) == pm.real_tokens, "loss_fn returned ",
             lo.grad_entropy.size(), " entropy gradients for a microbatch of ", pm.real_tokens, " tokens");
    // This rank's positions; padding and each sequence's last position (no
    // label: its log-prob and entropy are the constant 0) get 0.
    const size_t P = size_t(pm.device.num_tokens);
    std::vector<double> d(P, 0.0), de(lo.grad_entropy.empty() ? 0 : P, 0.0);
    for (size_t p = 0; p < P; ++p) {
      if (pm.token_index[p] < 0 || !pm.has_label[p]) continue;
      d[p] = -lo.grad_log_probs[size_t(pm.token_index[p])];
      if (!de.empty()) de[p] = lo.grad_entropy[size_t(pm.token_index[p])];
    }
    ScheduleHooks::LossGrads grads;
    grads.dloss = Tensor::from_doubles(d, {pm.device.num_tokens}, loss_dt).to(device_);
    if (!de.empty()) grads.dentropy = Tensor::from_doubles(de, {pm.device.num_tokens}, loss_dt).to(device_);
    return grads;
  };
  // The auxiliary losses (MoE routers) are scalars per microbatch beside the
  // per-token loss: weighted by each microbatch's share of the step's loss
  // tokens, summed over microbatches, pipeline stages (each stage's layers
  // add their own) and dp ranks (docs/models.md). The router metrics are
  // this dp rank's, per microbatch, summed over the stages.
  bool has_aux = false, router = false;
  double local_aux = 0, local_aux_loss = 0;
  std::map<std::string, std::vector<double>> router_metrics;
  hooks.aux_loss = [&](size_t i, const AuxLoss& aux) {
    auto add = [&](const std::string& key, double v) {
      std::vector<double>& m = router_metrics[key];
      m.resize(mbs.size(), 0.0);
      m[i] += v;
    };
    for (const auto& [k, v] : aux.metrics) add(k, v);
    router = router || aux.present || !aux.metrics.empty();
    local_aux_loss += aux.loss;
    if (!aux.present) return;
    has_aux = true;
    add("aux_loss", aux.value);
    local_aux += prepared[i].device.aux_loss_weight * aux.value;
  };
  DistributedOptimizer& opt = *st.optimizer;
  if (!forward_only) opt.invalidate_grads();
  // The last microbatch's backward reports finished parameters so their buckets' dp reduction overlaps the rest.
  if (!pipelined) {
    const GradReadyFn on_grad_ready = [&opt](const Parameter& p) { opt.grad_ready(p); };
    run_sequential_schedule(model, prepared, forward_only, hooks, on_grad_ready);
  } else {
    // A tied embedding's gradient is summed over its two copies after the
    // schedule (Megatron's _allreduce_embedding_grads): inside it the last
    // stage would wait on the first stage's backward, which waits on it.
    std::vector<Parameter*> tied;
    const GradReadyFn on_grad_ready = [&](const Parameter& p) {
      for (ModelChunk* c : h.chunks())
        for (Parameter* t : c->tied_params())
          if (t == &p) {
            tied.push_back(t);
            return;
          }
      opt.grad_ready(p);
    };
    run_pipeline_schedule(h.chunks(), prepared, forward_only, hooks, on_grad_ready, parallel_->pp(),
                          pipeline_shapes(st, parallel_->tp_size(), device_));
    for (Parameter* t : tied) {
      sum_tied_grad_over_pipeline_ends(parallel_->pp(), *t);
      opt.grad_ready(*t);
    }
  }
  if (!forward_only) opt.check_all_reported();

  if (!host_outputs) {
    if (cp.size > 1) parallel_->cp().all_reduce(loss_sums);   // each cp rank summed its own chunks
    const std::vector<double> sums = loss_sums.to_doubles();   // the step's one host sync for the loss
    for (size_t i = 0; i < sums.size(); ++i) {
      const double tokens = prepared[i].microbatch_loss_tokens;
      result.model_output[i].loss = tokens > 0 ? sums[i] / tokens : 0.0;
      result.metrics["loss"].push_back(result.model_output[i].loss);
      local_loss_sum += sums[i];
    }
  }
  // Only the last pipeline stage saw the loss: every other rank gets its
  // microbatch outputs and metrics, and the sums the loss is made of.
  if (pipelined) {
    broadcast_from_last_stage(parallel_->pp(), device_, result, local_loss_sum);
    router = parallel_->pp().all_reduce_scalar(router ? 1.0 : 0.0) > 0;
    if (router) sum_metrics_over_stages(parallel_->pp(), device_, router_metrics, mbs.size());
    has_aux = router_metrics.count("aux_loss") > 0;
    if (router) {
      local_aux = parallel_->pp().all_reduce_scalar(local_aux);
      local_aux_loss = parallel_->pp().all_reduce_scalar(local_aux_loss);
    }
  }
  for (auto& [k, v] : router_metrics) result.metrics[k] = std::move(v);
  if (replay == RouterReplayMode::Record) {
    // Each stage wrote its own layers' ids and left the others 0: the sum over stages is the whole record.
    std::map<std::string, std::vector<double>> recorded;
    for (size_t i = 0; i < prepared.size(); ++i) {
      const std::vector<int64_t>& ids = prepared[i].router_replay->routed_experts();
      recorded[std::to_string(i)].assign(ids.begin(), ids.end());
    }
    if (pipelined) sum_metrics_over_stages(parallel_->pp(), device_, recorded, 0);
    for (size_t i = 0; i < prepared.size(); ++i) {
      const std::vector<double>& ids = recorded[std::to_string(i)];
      result.model_output[i].routed_experts.assign(ids.begin(), ids.end());
    }
  }
  if (loss_fn) {
    result.loss = parallel_->dp().all_reduce_scalar(local_loss_sum) / double(parallel_->dp_size() * mbs.size());
  } else {
    result.loss = global_tokens > 0 ? parallel_->dp().all_reduce_scalar(local_loss_sum) / global_tokens : 0.0;
  }
  if (has_aux) result.aux_loss = parallel_->dp().all_reduce_scalar(local_aux);
  if (router) result.loss += parallel_->dp().all_reduce_scalar(local_aux_loss);
  return result;
}

OptimizerStepResult Runtime::optimizer_step(ModelHandle& h) {
  ModelState& st = h.state();
  BB_CHECK(st.training, "optimizer_step in eval mode");
  check_on_device(st, OffloadParts{}, "optimizer_step");
  // A zero_grad without a backward since leaves lazily zeroed gradients pending.
  for (auto& chunk : st.chunks) chunk->params().settle_grads();
  OptimizerStepResult result = st.optimizer->step(st.schedule->lr_at(st.scheduler_steps));
  st.microbatches_this_step = 0;
  for (auto& chunk : st.chunks) chunk->after_optimizer_step();
  return result;
}

double Runtime::current_lr(ModelHandle& h) const {
  ModelState& st = h.state();
  return st.schedule->lr_at(st.scheduler_steps);
}

double Runtime::lr_scheduler_step(ModelHandle& h) {
  ModelState& st = h.state();
  ++st.scheduler_steps;
  return st.schedule->lr_at(st.scheduler_steps);
}

Tensor Runtime::logits(ModelHandle& h, const PackedBatch& data) {
  ModelState& st = h.state();
  check_on_device(st, OffloadParts{true, false, false}, "logits");
  ModelChunk& first = *st.chunks.front();
  const int64_t V = first.vocab_size();
  const ContextSplit cp{parallel_->cp_size(), parallel_->cp_rank()};
  PreparedMicroBatch pm = prepare_microbatch(data, V, parallel_->tp_size(), device_,
                                             stat_dtype(first.params().param_dtype()), cp);
  dist::Communicator& pp = parallel_->pp();
  const int stages = pp.size() * int(st.chunks.size());
  const bool last_stage = pp.rank() == pp.size() - 1;
  // Stage by stage in model order (stage v x pp + r is chunk v of pp rank r),
  // each stage's hidden states broadcast over pp for the next: a validation
  // call, so no overlap.
  Tensor x;   // the hidden states between stages, then this rank's positions' logits [T padded, V] on the last stage
  for (int s = 0; s < stages; ++s) {
    const int owner = s % pp.size();
    Tensor out = owner == pp.rank() ? st.chunks[size_t(s / pp.size())]->logits(pm.device, x) : Tensor();
    if (s + 1 == stages) {
      x = out;
      break;
    }
    if (owner != pp.rank()) {
      const PipelineShapes shapes = pipeline_shapes(st, parallel_->tp_size(), device_);
      out = Tensor::empty({pm.device.num_tokens / shapes.tp, shapes.hidden_size}, shapes.dtype, device_);
    }
    pp.broadcast(out, owner);
    x = out;
  }
  // Into the batch's token order: under cp each last-stage rank fills in its
  // own tokens' rows and the sum over cp has them all.
  const int64_t T = pm.real_tokens;
  Tensor full = Tensor::zeros({T, V}, DType::F64, device_);
  if (last_stage) {
    std::vector<double> rows(size_t(T * V), 0.0);
    const std::vector<double> lv = x.to_doubles();
    for (size_t p = 0; p < pm.token_index.size(); ++p) {
      const int64_t t = pm.token_index[p];
      if (t >= 0) std::copy_n(lv.begin() + std::ptrdiff_t(p) * V, V, rows.begin() + t * V);
    }
    full = Tensor::from_doubles(rows, {T, V}, DType::F64).to(device_);
    if (cp.size > 1) parallel_->cp().all_reduce(full);
  }
  if (pp.size() > 1) pp.broadcast(full, pp.size() - 1);   // only the last stage computed them
  return full.to(Device::cpu());
}

}  // namespace bb
