// The training state one rank holds, as the pieces of a sharded checkpoint
// (primitive/ckpt/sharded_checkpoint.h): the parameters under "model/<HF
// name>" (each its tensor-parallel shard, vocabulary padding left out) and,
// for trainable groups only, the distributed optimizer's slices under
// "master/", "exp_avg/" and "exp_avg_sq/" (each dp slice of a parameter cut
// into boxes of its HF tensor). Frozen and buffer groups have no optimizer
// state, so they appear under "model/" only. The pieces view the live
// buffers: a save writes from them, a load copies into them.
#pragma once

#include <vector>

#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"
#include "bumblebee/runtime/model_state.h"

namespace bb {

// The box of the HF tensor that parameter `p` holds here (its tp / etp split).
TensorBox parameter_box(const Parameter& p);

// Save: a tied copy (the embedding's copy on the last pipeline stage) is the
// first stage's to write and is left out; Load: every parameter, so the
// copy is filled from the same saved tensor.
enum class PieceUse { Save, Load };
std::vector<TensorPiece> training_state_pieces(ModelState& st, PieceUse use);

}  // namespace bb
