// run_training: the training loop of bb-train over the runtime API, and the files it leaves in output.dir.
//
// Per step: zero_grad -> forward_backward -> optimizer_step -> lr_scheduler_step
// on TrainData's batch. World rank 0 writes, into output.dir:
//   metrics.jsonl                    one JSON object per train step and per validation
//   events.out.tfevents.<time>.<host> TensorBoard scalars train/loss, train/grad_norm, train/lr,
//                                    train/tokens_per_s (every step) and valid/loss
//   loss.svg                         train and valid loss curves
//   final_metrics.json               the run's summary (what run_training returns)
//   recipe.json                      the resolved recipe (every key), to rerun the same thing
//   data/                            the tokenised data.jsonl (pretrain)
//   hf/                              the trained model as an HF directory (output.save_hf)
// A run that does not resume replaces the event files, metrics and plots of an
// earlier run in the same directory. A run that resumes (train.resume=true and
// OUT/checkpoint, .tmp or .old exists) continues them: metrics.jsonl is cut
// back to the checkpoint's step and appended to, a new event file is written
// beside the earlier ones, and loss.svg and final_metrics.json cover the whole
// run. Nothing in output.dir is touched before the configs are valid and the
// checkpoint has loaded.
#pragma once

#include <nlohmann/json.hpp>

#include "bumblebee/train/recipe.h"

namespace bb::train {

nlohmann::json run_training(const Recipe& recipe, const std::string& recipe_name);

}  // namespace bb::train
