// The reader of format version 4 training checkpoints, kept so that
// checkpoints written before the sharded format (version 5) still resume.
//
// Version 4 layout:
//   model/                  the model as an HF checkpoint, from rank 0
//   optimizer/master/       the master weights and the Adam moments, each an
//   optimizer/exp_avg/      HF-named safetensors set of full tensors (every
//   optimizer/exp_avg_sq/   tensor of the model, frozen ones holding their values)
//   adapter/                with LoRA: HF peft's files; the optimizer folders then
//                           hold adapter/ folders of the LoRA state instead
//   trainer_state.json      also optimizer_tensors: per folder, every tensor's shape and dtype
// Each optimizer folder is read back through the model's import mapping into
// parameter-shaped buffers at this layout, of which each rank keeps its dp slices.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/runtime/model_state.h"

namespace bb {

// Fills the model and the optimizer state from the version 4 checkpoint at
// `dir` (already recovered, its trainer_state.json `state` checked against the
// model); verifies every file it reads against the manifest first.
void load_checkpoint_v4(ModelState& st, const std::string& dir, const nlohmann::json& state);

}  // namespace bb
