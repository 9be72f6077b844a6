// Pipeline stage layout: which decoder layers, and whether the embedding and
// the loss head, each pipeline piece holds.
//
// A layout has pp * vpp pieces in Megatron's order: piece v * pp + r is
// virtual stage v of pipeline rank r, and the pieces hold consecutive layers
// in piece order. `pp_layout` spells it in the seed's syntax, pieces
// separated by `|`, items by `,`:
//   E      the embedding (first item of the first piece only)
//   t, t*N one decoder layer, N decoder layers
//   L      the loss head: final norm, LM head and loss (last item of the last piece only)
//   m, m*N one multi-token prediction layer, N of them: in the last piece,
//          after its decoder layers and before L, as many as the model's
//          num_nextn_predict_layers (the last stage runs them; they take the
//          main model's final hidden states and every token id)
// e.g. "E,t*2|t*3|t*3|t,L" for 9 layers over pp = 4. An empty `pp_layout`
// splits the layers evenly: with num_layers divisible by pp * vpp that is
// Megatron's split; otherwise the earlier pieces take one layer more each
// (numpy.array_split's rule), so no piece differs from another by more than
// one layer; the MTP layers then go with the last piece. Errors name the numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bumblebee/primitive/modules/layer_range.h"

namespace bb {

struct PipelineLayout {
  int pp = 1, vpp = 1;
  std::vector<LayerRange> pieces;   // pp * vpp, piece v * pp + r on pipeline rank r
  const LayerRange& piece(int pp_rank, int virtual_stage) const { return pieces[size_t(virtual_stage * pp + pp_rank)]; }
};

PipelineLayout make_pipeline_layout(const std::string& pp_layout, int64_t num_layers, int pp, int vpp,
                                    int64_t mtp_layers = 0);

}  // namespace bb
