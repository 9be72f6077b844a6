// LayerRange: which part of a decoder model one chunk holds (Megatron's
// pre_process / post_process and its layer offset). A pipeline stage, or a
// virtual-pipeline chunk of one; the whole model is the default.
#pragma once

#include <cstdint>

namespace bb {

struct LayerRange {
  int64_t first_layer = 0;
  int64_t end_layer = -1;    // -1: through the last layer
  bool pre_process = true;   // the embedding (the first stage)
  bool post_process = true;  // the final norm, LM head and loss (the last stage)
  bool whole_model() const { return first_layer == 0 && end_layer < 0 && pre_process && post_process; }
  bool holds_layer(int64_t layer) const { return layer >= first_layer && (end_layer < 0 || layer < end_layer); }
};

}  // namespace bb
