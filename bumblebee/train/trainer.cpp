// The bb-train loop: steps, validation, stdout / JSONL / TensorBoard logging, final plot and summary.
#include "bumblebee/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/error.h"
#include "bumblebee/distributed/world.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/runtime.h"
#include "bumblebee/train/jsonl_logger.h"
#include "bumblebee/train/loss_plot.h"
#include "bumblebee/train/metrics_history.h"
#include "bumblebee/train/tensorboard_writer.h"
#include "bumblebee/train/train_data.h"

namespace bb::train {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Written to a temporary name and renamed, so a reader never sees half a file.
void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << content;
    BB_CHECK(f.good(), "cannot write ", tmp);
  }
  fs::rename(tmp, path);
}

// The MoE router metrics of a step for the log (empty for dense models):
// aux_loss as ForwardResult has it (all dp ranks, weighted by loss tokens),
// the rest this rank's: z_loss the mean over microbatches, dropped_tokens
// their sum, expert_load_min.L / expert_load_max.L the least and the most
// rows an expert of MoE layer L got in any microbatch.
nlohmann::json router_step_metrics(const ForwardResult& r) {
  nlohmann::json out = nlohmann::json::object();
  if (r.metrics.count("aux_loss")) out["aux_loss"] = r.aux_loss;
  for (const auto& [key, v] : r.metrics) {
    if (v.empty()) continue;
    if (key == "z_loss") out[key] = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    if (key == "dropped_tokens") out[key] = std::accumulate(v.begin(), v.end(), 0.0);
    if (key.starts_with("expert_load_min.")) out[key] = *std::min_element(v.begin(), v.end());
    if (key.starts_with("expert_load_max.")) out[key] = *std::max_element(v.begin(), v.end());
  }
  return out;
}

// Removes the event files, metrics and plot of an earlier run in `dir` (a run
// that does not resume): two event files in one directory would merge into
// one TensorBoard run.
int clear_earlier_outputs(const std::string& dir) {
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("events.out.tfevents.") || name == "metrics.jsonl" || name == "loss.svg" ||
        name == "final_metrics.json") {
      fs::remove(entry.path());
      ++removed;
    }
  }
  return removed;
}

int64_t count_parameters(ModelHandle& h) {
  int64_t n = 0;
  for (const Parameter& p : h.model().params().params()) n += shape_numel(p.full_shape);
  return n;
}

// Token-weighted mean loss over the validation batches (no gradients).
double validate(Runtime& rt, ModelHandle& h, const TrainData& data, int num_microbatches) {
  auto eval = rt.eval_mode(h);
  double loss_sum = 0, tokens = 0;
  for (const PackedBatch& b : data.valid_batches()) {
    const ForwardResult r = rt.forward_backward(h, b, {}, num_microbatches, /*forward_only=*/true);
    loss_sum += r.loss * double(r.num_tokens);
    tokens += double(r.num_tokens);
  }
  return tokens > 0 ? loss_sum / tokens : 0.0;
}

}  // namespace

nlohmann::json run_training(const Recipe& recipe, const std::string& recipe_name) {
  const bool root = dist::World::instance().rank() == 0;
  auto log = [&](const std::string& line) {
    if (!root) return;
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const std::string out_dir = recipe.output_dir;
  // Nothing in out_dir is touched until the runtime and model configs are
  // valid and the checkpoint (when resuming) has loaded: a run that fails
  // before it trains leaves an earlier run's files as they were.
  const auto t_start = Clock::now();
  auto rt = create_runtime(recipe.runtime);
  ModelHandle h = rt->build_model();
  const TrainRecipe& tr = recipe.train;
  const int num_mb = int(tr.num_microbatches);
  const int64_t params = count_parameters(h);
  {
    char line[512];
    std::snprintf(line, sizeof line,
                  "bb-train %s: %s (%lld parameters, %s init) on %s, backend %s, tp %d, dp %d; %lld steps of %lld x "
                  "%d x %d sequences; output %s",
                  recipe_name.c_str(), h.config().value("model_type", std::string("?")).c_str(), (long long)params,
                  recipe.runtime.backend_cfg.load_hf_weights ? "HF weights" : "random", rt->device().str().c_str(),
                  recipe.runtime.backend.c_str(), recipe.runtime.backend_cfg.parallel.tp, h.dp_size(),
                  (long long)tr.steps, (long long)tr.micro_batch_size, num_mb, h.dp_size(), out_dir.c_str());
    log(line);
  }
  const auto data = make_train_data(recipe, out_dir, h.model().vocab_size(), {h.dp_rank(), h.dp_size()}, log);
  const std::string checkpoint_dir = out_dir + "/checkpoint";
  int64_t first_step = 1;
  // Anything a save left (even an incomplete one) is resumed or is an error:
  // starting over would let the first save delete it.
  const bool resumed = tr.resume && checkpoint_exists(checkpoint_dir);
  if (resumed) {
    first_step = rt->load_checkpoint(h, checkpoint_dir) + 1;
    log("resumed from " + checkpoint_dir + " after step " + std::to_string(first_step - 1));
  }

  std::optional<JsonlLogger> metrics;
  std::optional<TensorBoardWriter> events;
  std::vector<nlohmann::json> history;   // the metrics of the run's earlier parts
  if (root) {
    fs::create_directories(out_dir);
    if (resumed) {
      history = keep_metrics_through(out_dir + "/metrics.jsonl", first_step - 1);
    } else if (const int n = clear_earlier_outputs(out_dir)) {
      log("replaced " + std::to_string(n) + " output files of an earlier run in " + out_dir);
    }
    write_file_atomically(out_dir + "/recipe.json", recipe.json.dump(2) + "\n");
    metrics.emplace(out_dir + "/metrics.jsonl", resumed ? JsonlLogger::Mode::Append : JsonlLogger::Mode::Truncate);
    events.emplace(out_dir);
  }
  // The plot and the summary cover the whole run, earlier parts included (a
  // non-finite loss was logged as null).
  LossCurve train_curve{"train", "#1f77b4", {}, false}, valid_curve{"valid", "#ff7f0e", {}, true};
  double first_loss = NAN, last_loss = NAN, last_valid = NAN, tokens_total = 0, train_seconds = 0, part_tokens = 0;
  int64_t skipped_updates = 0;
  for (const nlohmann::json& r : history) {
    const double loss = r.contains("loss") && r["loss"].is_number() ? r["loss"].get<double>() : NAN;
    if (r.value("type", "") == "train") {
      if (train_curve.points.empty()) first_loss = loss;
      last_loss = loss;
      train_curve.points.emplace_back(double(r["step"].get<int64_t>()), loss);
      tokens_total += r.value("tokens", 0.0);
      if (!r.value("update_successful", true)) ++skipped_updates;
    } else if (r.value("type", "") == "valid") {
      last_valid = loss;
      valid_curve.points.emplace_back(double(r["step"].get<int64_t>()), loss);
    }
  }
  const auto t_train = Clock::now();
  auto train_mode = rt->train_mode(h);
  for (int64_t step = first_step; step <= tr.steps; ++step) {
    const PackedBatch batch = data->train_batch(step - 1);
    const auto t0 = Clock::now();
    const double lr = rt->current_lr(h);
    rt->zero_grad(h);
    const ForwardResult r = rt->forward_backward(h, batch, {}, num_mb);
    const OptimizerStepResult s = rt->optimizer_step(h);
    rt->lr_scheduler_step(h);
    const double step_seconds = seconds_since(t0);
    train_seconds += step_seconds;
    const double tokens = h.dp_group().all_reduce_scalar(double(batch.total_tokens()));
    tokens_total += tokens;
    part_tokens += tokens;
    const double tokens_per_s = tokens / step_seconds, elapsed = seconds_since(t_start);
    if (train_curve.points.empty()) first_loss = r.loss;
    last_loss = r.loss;
    if (!s.update_successful) ++skipped_updates;
    train_curve.points.emplace_back(double(step), r.loss);
    if (root) {
      nlohmann::json line = {{"type", "train"}, {"step", step}, {"loss", r.loss}, {"grad_norm", s.grad_norm},
                             {"lr", lr}, {"tokens", int64_t(tokens)}, {"loss_tokens", r.num_tokens},
                             {"tokens_per_s", tokens_per_s}, {"step_time_s", step_seconds}, {"elapsed_s", elapsed},
                             {"update_successful", s.update_successful}};
      line.update(router_step_metrics(r));
      metrics->write(line);
      events->add_scalars(step, {{"train/loss", float(r.loss)}, {"train/grad_norm", float(s.grad_norm)},
                                 {"train/lr", float(lr)}, {"train/tokens_per_s", float(tokens_per_s)}});
      if (step % tr.log_interval == 0 || step == 1 || step == tr.steps)
        std::printf("step %6lld/%lld | loss %.4f | grad_norm %.3f | lr %.3e | tokens/s %.0f | trained tokens %lld"
                    " | elapsed %.1fs%s\n",
                    (long long)step, (long long)tr.steps, r.loss, s.grad_norm, lr, tokens_per_s,
                    (long long)r.num_tokens, elapsed,
                    s.update_successful ? "" : " | update skipped (non-finite gradient)");
      std::fflush(stdout);
    }
    const bool eval_now =
        tr.eval_batches > 0 && ((tr.eval_interval > 0 && step % tr.eval_interval == 0) || step == tr.steps);
    if (eval_now) {
      const auto tv = Clock::now();
      last_valid = validate(*rt, h, *data, num_mb);
      valid_curve.points.emplace_back(double(step), last_valid);
      if (root) {
        const double valid_seconds = seconds_since(tv);
        metrics->write({{"type", "valid"}, {"step", step}, {"loss", last_valid}, {"perplexity", std::exp(last_valid)},
                        {"eval_time_s", valid_seconds}, {"elapsed_s", seconds_since(t_start)}});
        events->add_scalars(step, {{"valid/loss", float(last_valid)}});
        std::printf("valid  %6lld/%lld | loss %.4f | perplexity %.2f | %.1fs\n", (long long)step, (long long)tr.steps,
                    last_valid, std::exp(last_valid), valid_seconds);
        std::fflush(stdout);
      }
    }
    if (recipe.save_interval > 0 && (step % recipe.save_interval == 0 || step == tr.steps)) {
      rt->save_checkpoint(h, checkpoint_dir);
      if (root) log("saved a training checkpoint after step " + std::to_string(step) + " to " + checkpoint_dir);
    }
  }
  const double loop_seconds = seconds_since(t_train);
  train_mode.reset();

  if (recipe.save_hf) {
    rt->save_hf_checkpoint(h, out_dir + "/hf");
    log("saved the trained model as an HF directory: " + out_dir + "/hf");
  }
  if (h.model().params().lora()) {
    rt->save_peft_adapter(h, out_dir + "/adapter");
    log("saved the LoRA adapter in HF peft format: " + out_dir + "/adapter");
  }
  const size_t tail = std::min<size_t>(10, train_curve.points.size());
  double tail_sum = 0;
  for (size_t i = train_curve.points.size() - tail; i < train_curve.points.size(); ++i)
    tail_sum += train_curve.points[i].second;
  nlohmann::json summary = {
      {"recipe", recipe_name},
      {"steps", tr.steps},
      {"num_parameters", params},
      {"first_train_loss", first_loss},
      {"final_train_loss", last_loss},
      {"final_train_loss_avg10", tail_sum / double(tail)},
      {"final_valid_loss", tr.eval_batches > 0 ? nlohmann::json(last_valid) : nlohmann::json(nullptr)},
      {"valid_evaluations", valid_curve.points.size()},
      {"skipped_updates", skipped_updates},
      {"tokens", int64_t(tokens_total)},
      {"resumed_after_step", first_step - 1},
      // Speed and times are of this part of the run only.
      {"tokens_per_s", part_tokens / train_seconds},
      {"train_loop_s", loop_seconds},
      // Rank 0's device-memory high-water mark over the run (weights, gradients, optimizer state, activations).
      {"peak_mem_gb", double(device_peak_bytes(rt->device())) / double(1ull << 30)},
      {"wall_time_s", seconds_since(t_start)},
      {"output_dir", out_dir}};
  if (root) {
    summary["events_file"] = events->path();
    std::vector<LossCurve> curves = {train_curve};
    if (!valid_curve.points.empty()) curves.push_back(valid_curve);
    write_file_atomically(out_dir + "/loss.svg", render_loss_svg(curves, "bb-train " + recipe_name));
    write_file_atomically(out_dir + "/final_metrics.json",
                          summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    char line[512];
    std::snprintf(line, sizeof line,
                  "done: %lld steps in %.1fs | train loss %.4f -> %.4f (last-10 mean %.4f) | valid loss %.4f | "
                  "%.0f tokens/s | %s/{metrics.jsonl,loss.svg,final_metrics.json}",
                  (long long)tr.steps, seconds_since(t_start), first_loss, last_loss, tail_sum / double(tail),
                  last_valid, part_tokens / train_seconds, out_dir.c_str());
    log(line);
  }
  return summary;
}

}  // namespace bb::train
