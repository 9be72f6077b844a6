// bb-correctness: the numbers a model must reproduce against HF transformers.
//
//   bb-correctness hf_path=DIR tokens=FILE.json [dtype=float64|float32|bfloat16]
//       [steps=N] [optimizer.lr=X ...] [logits_out=FILE] [params_out=DIR]
//       [backend=bb|ref] [device=cpu|cuda] [backend.parallel.tp=N] [rows_per_step=R]
//
// FILE.json is a list of equal-length token-id lists (B sequences of T). Prints
// one JSON object: loss (mean next-token cross entropy over B*(T-1)
// positions), grad_norm, per_param_grad_norm (by HF name), losses (the loss
// before each of N AdamW steps), and with logits_out the float32 logits
// [B, T, V] raw little-endian. Under mpirun the sequences are split over dp
// ranks and rank 0 prints. With rows_per_step=R, step s trains on rows
// [R*(s mod B/R), +R) instead of the whole file, and grad_norms lists the
// optimizer's gradient norm at every step (the bf16 parity run uses this).
// resume_from=DIR loads a training checkpoint first (steps continue from it);
// checkpoint_out=DIR saves one after the last step.
#include <cmath>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bumblebee/distributed/world.h"
#include "bumblebee/ops/ops.h"
#include "bumblebee/runtime/cli_args.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/runtime/tool_main.h"

using namespace bb;

namespace {

std::vector<std::vector<int64_t>> read_tokens(const std::string& path) {
  std::ifstream f(path);
  BB_CHECK(f.good(), "cannot open tokens file ", path);
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
      BB_CHECK(id.is_number_integer(), "tokens file ", path, ": token ids must be integers");
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

// Per-parameter gradient norms of the full (unsharded, dp-summed) gradient.
nlohmann::json per_param_grad_norms(Runtime& rt, ModelHandle& h, double& total_sq) {
  dist::ParallelState& ps = rt.parallel_state();
  nlohmann::json out = nlohmann::json::object();
  total_sq = 0;
  for (Parameter& p : h.model().params().params()) {
    Tensor g = p.grad;
    if (ps.dp_size() > 1) {
      g = p.grad.clone();
      ps.dp().all_reduce(g);
    }
    double sq = ops::sum_squares(g);
    if (!p.replicated_over_tp()) sq = ps.tp().all_reduce_scalar(sq);
    out[p.name] = std::sqrt(sq);
    total_sq += sq;
  }
  return out;
}

int run(int argc, char** argv) {
  const std::vector<std::string> keys = {
      "hf_path", "tokens", "dtype", "steps", "rows_per_step", "resume_from", "checkpoint_out", "logits_out", "params_out", "backend", "device",
      "backend.parallel.tp", "backend.fp32_residual_connection", "optimizer.lr", "optimizer.adam_beta1", "optimizer.adam_beta2",
      "optimizer.adam_eps", "optimizer.weight_decay", "optimizer.clip_grad", "optimizer.grad_bucket_size"};
  KeyValueArgs args = KeyValueArgs::parse(argc, argv, keys);
  BB_CHECK(args.has("hf_path"), "hf_path=DIR is required");
  BB_CHECK(args.has("tokens"), "tokens=FILE.json is required");
  const auto seqs = read_tokens(args.get("tokens", ""));

  RuntimeConfig cfg;
  cfg.backend = args.get("backend", "bb");
  cfg.hf_path = args.get("hf_path", "");
  BBConfig& b = cfg.backend_cfg;
  b.device = args.get("device", "cpu");
  b.dtype = args.get("dtype", Device::parse(b.device).is_cuda() ? "bfloat16" : "float64");
  b.parallel.tp = int(args.get_int("backend.parallel.tp", 1));
  b.fp32_residual_connection = args.get_bool("backend.fp32_residual_connection", false);
  OptimizerConfig& o = b.optimizer;
  o.lr = args.get_double("optimizer.lr", 1e-3);
  o.adam_beta1 = args.get_double("optimizer.adam_beta1", 0.9);
  o.adam_beta2 = args.get_double("optimizer.adam_beta2", 0.999);
  o.adam_eps = args.get_double("optimizer.adam_eps", 1e-8);
  o.weight_decay = args.get_double("optimizer.weight_decay", 0.01);
  o.no_weight_decay_1d = false;   // torch.optim.AdamW semantics
  o.clip_grad = args.get_double("optimizer.clip_grad", 0.0);
  o.grad_bucket_size = args.get_int("optimizer.grad_bucket_size", o.grad_bucket_size);
  const int64_t steps = args.get_int("steps", 0);
  BB_CHECK(steps >= 0, "steps must be >= 0, got ", steps);

  auto rt = create_runtime(cfg);
  ModelHandle h = rt->build_model();
  const size_t dp = size_t(h.dp_size()), r = size_t(h.dp_rank());
  const size_t rows = size_t(args.get_int("rows_per_step", int64_t(seqs.size())));
  BB_CHECK(rows >= 1 && rows <= seqs.size() && seqs.size() % rows == 0, "rows_per_step ", rows,
           " must divide the ", seqs.size(), " sequences of the tokens file");
  BB_CHECK(rows >= dp, "rows_per_step ", rows, " is smaller than dp size ", dp);
  // This dp rank's part of the rows that step `step` trains on.
  auto batch_of = [&](int64_t step) {
    const size_t base = rows * (size_t(step) % (seqs.size() / rows));
    return pack(seqs, base + r * rows / dp, (r + 1) * rows / dp - r * rows / dp);
  };
  const bool root = rt->parallel_state().world_rank() == 0;
  const int64_t first_step = args.has("resume_from") ? rt->load_checkpoint(h, args.get("resume_from", "")) : 0;

  nlohmann::json out;
  if (args.has("logits_out")) {
    // Every rank computes the logits of the whole batch (the tp group needs all ranks).
    Tensor logits = rt->logits(h, pack(seqs, 0, seqs.size()));
    if (root) {
      const std::string path = args.get("logits_out", "");
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
    ForwardResult res = rt->forward_backward(h, batch_of(first_step + step));
    if (step == 0) {
      double total_sq = 0;
      out["loss"] = res.loss;
      out["per_param_grad_norm"] = per_param_grad_norms(*rt, h, total_sq);
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
  if (args.has("checkpoint_out")) rt->save_checkpoint(h, args.get("checkpoint_out", ""));
  if (args.has("params_out")) rt->save_hf_checkpoint(h, args.get("params_out", ""));
  if (root) std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run_tool(argc, argv, run); }
