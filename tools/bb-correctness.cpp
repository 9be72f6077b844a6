// bb-correctness: the numbers a model must reproduce against HF transformers.
//
//   bb-correctness hf_path=DIR tokens=FILE.json [backend.dtype=float64|float32|bfloat16]
//       [steps=N] [optimizer.lr=X ...] [logits_out=FILE] [params_out=DIR] [adapter_out=DIR]
//       [backend=bb|ref] [backend.device=cpu|cuda] [backend.parallel.tp=N] [rows_per_step=R]
//   bb-correctness help     (every key with its type, default and meaning)
//
// The runtime keys are every tool's (docs/runtime.md); this tool's defaults
// are torch.optim.AdamW's: optimizer.lr=1e-3, optimizer.clip_grad=0, weight
// decay on every parameter (optimizer.no_weight_decay_1d=false), and float64
// on the CPU.
//
// FILE.json is a list of equal-length token-id lists (B sequences of T). Prints
// one JSON object: loss (mean next-token cross entropy over B*(T-1)
// positions, plus router_aux_loss_coef x aux_loss for MoE models with
// output_router_logits, which then also print aux_loss; plus the scaled
// multi-token prediction loss for deepseek_v3 with MTP layers, which then
// also prints mtp_loss, the unscaled mean over depths and this rank's
// microbatches), grad_norm,
// per_param_grad_norm (by the checkpoint's names: fused experts as their
// fused tensors), losses (the loss
// before each of N AdamW steps), and with logits_out the float32 logits
// [B, T, V] raw little-endian. Under mpirun the sequences are split over dp
// ranks and rank 0 prints. With rows_per_step=R, step s trains on rows
// [R*(s mod B/R), +R) instead of the whole file, and grad_norms lists the
// optimizer's gradient norm at every step (the bf16 parity run uses this).
// resume_from=DIR loads a training checkpoint first (steps continue from it);
// checkpoint_out=DIR saves one after the last step; with peft.type=lora,
// adapter_out=DIR saves the adapter in HF peft's format (docs/peft.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/core/input_file.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/runtime/config_schema.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/runtime/tool_main.h"

using namespace bb;

namespace {

std::vector<std::vector<int64_t>> read_tokens(const std::string& path) {
  std::ifstream f = open_input_file(path, "tokens file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    BB_FAIL("tokens file ", path, " is not valid JSON: ", e.what());
  }
  BB_CHECK(j.is_array() && !j.empty(), "tokens file ", path, " must hold a non-empty list of token-id lists");
  std::vector<std::vector<int64_t>> out;
  for (const auto& row : j) {
    BB_CHECK(row.is_array() && !row.empty(), "tokens file ", path, ": every entry must be a non-empty list of ids");
    out.emplace_back();
    for (const auto& id : row) {
      BB_CHECK(id.is_number_integer(), "tokens file ", path, ": token ids must be integers, got ", id.dump());
      // JSON reads ids above 2^63-1 as unsigned; as int64 they would wrap and be reported as another id.
      BB_CHECK(!id.is_number_unsigned() || id.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
               "tokens file ", path, ": token id ", id.get<uint64_t>(), " (row ", out.size() - 1, ", position ",
               out.back().size(), ") is outside the vocabulary");
      out.back().push_back(id.get<int64_t>());
    }
    BB_CHECK(out.back().size() == out.front().size(), "tokens file ", path, ": sequences differ in length (",
             out.front().size(), " and ", out.back().size(), ")");
  }
  return out;
}

PackedBatch pack(const std::vector<std::vector<int64_t>>& seqs, size_t first, size_t count) {
  PackedBatch b;
  for (size_t i = first; i < first + count; ++i) {
    b.input_ids.insert(b.input_ids.end(), seqs[i].begin(), seqs[i].end());
    b.seq_lens.push_back(int64_t(seqs[i].size()));
  }
  return b;
}

// Each rank's (name, squared grad norm) pairs (an ep rank's experts, a
// pipeline stage's parameters), gathered so every rank reports all of them:
// the names travel as character codes in one summed buffer, a slot per rank
// sized for the rank with the most.
std::vector<std::pair<std::string, double>> gather_named_values(dist::Communicator& ep,
                                                                const std::vector<std::pair<std::string, double>>& mine) {
  if (ep.size() == 1) return mine;
  constexpr size_t kWidth = 257;   // the squared norm, then up to 256 characters of name
  const size_t slot = size_t(ep.all_reduce_scalar(double(mine.size()), dist::ReduceOp::Max)) * kWidth;
  std::vector<double> buf(slot * size_t(ep.size()), 0.0);
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& [name, sq] = mine[i];
    BB_CHECK(!name.empty() && name.size() < kWidth, "parameter name '", name, "' is longer than ", kWidth - 1, " characters");
    double* at = buf.data() + size_t(ep.rank()) * slot + i * kWidth;
    at[0] = sq;
    for (size_t c = 0; c < name.size(); ++c) at[c + 1] = double(static_cast<unsigned char>(name[c]));
  }
  Tensor t = Tensor::from_doubles(buf, {int64_t(buf.size())}, DType::F64);
  ep.all_reduce(t);
  const std::vector<double> all = t.to_doubles();
  std::vector<std::pair<std::string, double>> out;
  for (size_t k = 0; k < all.size(); k += kWidth) {
    std::string name;
    for (size_t c = 1; c < kWidth && all[k + c] != 0.0; ++c) name.push_back(char(int(all[k + c])));
    if (!name.empty()) out.emplace_back(name, all[k]);   // an unused entry of a rank's slot
  }
  return out;
}

// Per-parameter gradient norms of the full (unsharded, dp-summed) gradient.
// Expert parameters are summed over edp (each ep rank already holds its
// experts' gradients of every ep rank's tokens), their etp parts summed, and
// gathered over ep; every
// pipeline stage's parameters are gathered over pp (a tied embedding's copy
// on the last stage holds the same summed gradient as the first stage's, and
// counts once).
nlohmann::json per_param_grad_norms(Runtime& rt, ModelHandle& h, double& total_sq) {
  dist::ParallelState& ps = rt.parallel_state();
  nlohmann::json out = nlohmann::json::object();
  std::vector<std::pair<std::string, double>> experts, dense;
  total_sq = 0;
  for (ModelChunk* chunk : h.chunks()) {
    const std::vector<Parameter*> tied = chunk->tied_params();
    for (Parameter& p : chunk->params().params()) {
      if (!p.requires_grad()) continue;   // frozen: no gradient
      if (!chunk->is_first_stage() && std::find(tied.begin(), tied.end(), &p) != tied.end()) continue;
      const bool expert = p.cls == ParamClass::Expert;
      dist::Communicator& data = expert ? ps.edp() : ps.cp_size() > 1 ? ps.dp_cp() : ps.dp();   // who reduces it
      Tensor g = p.grad;
      if (data.size() > 1) {
        g = p.grad.clone();
        data.all_reduce(g);
      }
      double sq = ops::sum_squares(g);
      if (!p.replicated_over_tp()) sq = (expert ? ps.etp() : ps.tp()).all_reduce_scalar(sq);   // who splits it
      (expert ? experts : dense).emplace_back(p.name, sq);
    }
  }
  for (const auto& [name, sq] : gather_named_values(ps.ep(), experts)) dense.emplace_back(name, sq);
  for (const auto& [name, sq] : gather_named_values(ps.pp(), dense)) {
    out[name] = std::sqrt(sq);
    total_sq += sq;
  }
  return out;
}

// Per-parameter norms under the checkpoint's own names: a layer whose experts
// the checkpoint holds fused (transformers 5's mlp.experts.gate_up_proj
// [E, 2I, H] and mlp.experts.down_proj [E, H, I]) reports the norm over each
// fused tensor in place of its per-expert parameters.
nlohmann::json in_checkpoint_names(const nlohmann::json& norms, const HFCheckpoint& ckpt) {
  nlohmann::json out = nlohmann::json::object();
  std::map<std::string, double> fused_sq;
  for (const auto& [name, norm] : norms.items()) {
    const size_t at = name.find(".mlp.experts.");
    const size_t dot = at == std::string::npos ? at : name.find('.', at + 13);
    if (dot != std::string::npos) {
      const std::string prefix = name.substr(0, at) + ".mlp.experts.", proj = name.substr(dot + 1);
      const std::string fused = prefix + (proj == "down_proj.weight" ? "down_proj" : "gate_up_proj");
      if (ckpt.has(fused)) {
        fused_sq[fused] += norm.get<double>() * norm.get<double>();
        continue;
      }
    }
    out[name] = norm;
  }
  for (const auto& [name, sq] : fused_sq) out[name] = std::sqrt(sq);
  return out;
}

// The runtime's keys with torch.optim.AdamW's defaults (the HF reference
// trains with it), and the tool's own keys.
ConfigSchema correctness_schema() {
  ConfigSchema s("bb-correctness", "bb-correctness hf_path=DIR tokens=FILE.json [steps=N] [key=value ...]");
  s.add_runtime_keys();
  s.override_default("optimizer.lr", 1e-3);
  s.override_default("optimizer.clip_grad", 0.0);
  s.override_default("optimizer.no_weight_decay_1d", false);
  s.override_default(
      "backend.dtype",
      [](const RuntimeConfig& c) { return Device::parse(c.backend_cfg.device).is_cuda() ? "bfloat16" : "float64"; },
      "float64 on cpu, bfloat16 on cuda");
  using T = ConfigType;
  const std::string g = "bb-correctness";
  s.add({"tokens", g, T::String, "", "JSON file: a list of equal-length token-id lists (required)"});
  s.add(ConfigKey{"steps", g, T::Int, 0, "AdamW steps after the first forward/backward"}.at_least(0));
  s.add(ConfigKey{"rows_per_step", g, T::Int, 0, "rows of the tokens file each step trains on (0: all)"}.at_least(0));
  s.add(ConfigKey{"num_microbatches", g, T::Int, 1,
                  "microbatches per step on each dp rank (whole rows; a pipeline needs >= pp)"}.at_least(1));
  s.add({"resume_from", g, T::String, "", "load this training checkpoint first (steps continue from it)"});
  s.add({"checkpoint_out", g, T::String, "", "save a training checkpoint here after the last step"});
  s.add({"logits_out", g, T::String, "", "write the float32 logits [B, T, V] here, raw little-endian"});
  s.add({"params_out", g, T::String, "", "save the trained model here as an HF directory"});
  s.add({"adapter_out", g, T::String, "", "with peft.type=lora: save the trained adapter here in HF peft's format"});
  return s;
}

int run(int argc, char** argv) {
  const ConfigSchema schema = correctness_schema();
  if (asks_for_help(argc, argv)) {
    std::fputs(schema.help().c_str(), stdout);
    return 0;
  }
  const ConfigArgs args = schema.parse(argc, argv);
  BB_CHECK(args.has("hf_path"), "hf_path=DIR is required");
  BB_CHECK(args.has("tokens"), "tokens=FILE.json is required");
  const auto seqs = read_tokens(args.str("tokens"));
  const RuntimeConfig& cfg = args.runtime;
  const int64_t steps = args.integer("steps");
  const int num_microbatches = int(args.integer("num_microbatches"));

  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const size_t dp = size_t(h.dp_size()), r = size_t(h.dp_rank());
  const size_t rows = args.integer("rows_per_step") > 0 ? size_t(args.integer("rows_per_step")) : seqs.size();
  BB_CHECK(rows >= 1 && rows <= seqs.size() && seqs.size() % rows == 0, "rows_per_step ", rows,
           " must divide the ", seqs.size(), " sequences of the tokens file");
  BB_CHECK(rows >= dp, "rows_per_step ", rows, " is smaller than dp size ", dp);
  // This dp rank's part of the rows that step `step` trains on.
  auto batch_of = [&](int64_t step) {
    const size_t base = rows * (size_t(step) % (seqs.size() / rows));
    return pack(seqs, base + r * rows / dp, (r + 1) * rows / dp - r * rows / dp);
  };
  const bool root = rt->parallel_state().world_rank() == 0;
  const int64_t first_step = args.has("resume_from") ? rt->load_checkpoint(h, args.str("resume_from")) : 0;

  nlohmann::json out;
  if (args.has("logits_out")) {
    // Every rank computes the logits of the whole batch (the tp group needs all ranks).
    Tensor logits = rt->logits(h, pack(seqs, 0, seqs.size()));
    if (root) {
      const std::string path = args.str("logits_out");
      std::vector<float> f;
      for (double v : logits.to_doubles()) f.push_back(float(v));
      std::ofstream lf(path, std::ios::binary);
      lf.write(reinterpret_cast<const char*>(f.data()), std::streamsize(f.size() * sizeof(float)));
      BB_CHECK(lf.good(), "cannot write ", path);
    }
  }
  auto train = rt->train_mode(h);
  nlohmann::json losses = nlohmann::json::array(), grad_norms = nlohmann::json::array();
  for (int64_t step = 0; step <= std::max<int64_t>(steps, 0); ++step) {
    rt->zero_grad(h);
    ForwardResult res = rt->forward_backward(h, batch_of(first_step + step), {}, num_microbatches);
    if (step == 0) {
      double total_sq = 0;
      out["loss"] = res.loss;
      // MoE models with output_router_logits: loss is HF's total (cross entropy + coef x aux_loss).
      if (res.metrics.count("aux_loss")) out["aux_loss"] = res.aux_loss;
      // Multi-token prediction: loss is the total; mtp_loss the mean over depths and microbatches (this rank's).
      if (res.metrics.count("mtp_loss")) {
        double sum = 0;
        for (double v : res.metrics.at("mtp_loss")) sum += v;
        out["mtp_loss"] = sum / double(res.metrics.at("mtp_loss").size());
      }
      out["per_param_grad_norm"] = per_param_grad_norms(*rt, h, total_sq);
      const std::string dir = args.str("hf_path");
      if (std::filesystem::exists(dir + "/model.safetensors") ||
          std::filesystem::exists(dir + "/model.safetensors.index.json"))
        out["per_param_grad_norm"] = in_checkpoint_names(out["per_param_grad_norm"], HFCheckpoint::open(dir));
      out["grad_norm"] = std::sqrt(total_sq);
    }
    if (step == steps) break;
    losses.push_back(res.loss);
    OptimizerStepResult s = rt->optimizer_step(h);
    BB_CHECK(s.update_successful, "optimizer step ", step, " skipped: gradient norm ", s.grad_norm, " is not finite");
    grad_norms.push_back(s.grad_norm);
    rt->lr_scheduler_step(h);
  }
  out["losses"] = losses;
  out["grad_norms"] = grad_norms;
  if (args.has("checkpoint_out")) rt->save_checkpoint(h, args.str("checkpoint_out"));
  if (args.has("params_out")) rt->save_hf_checkpoint(h, args.str("params_out"));
  if (args.has("adapter_out")) rt->save_peft_adapter(h, args.str("adapter_out"));
  if (root) std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
