// Moving parameters between a model's ParamStore and HF-named full tensors.
//
// Parameters carry their HF name and tensor-parallel split, so loading slices
// each rank's part out of the checkpoint tensor and exporting gathers the
// parts back (dropping vocabulary padding). The checkpoint must hold exactly
// the model's tensors: a missing, unexpected or mis-shaped tensor is an error
// naming it.
#pragma once

#include <functional>
#include <string>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/primitive/modules/parameter.h"
#include "bumblebee/primitive/parallel/tensor_parallel.h"

namespace bb {

// `tied_head` names a checkpoint tensor that may be present and is ignored
// because the model ties it to the embedding (HF writes it for some models).
void load_hf_weights(ParamStore& store, const HFCheckpoint& ckpt, const std::string& tied_head = "lm_head.weight");

// Calls sink(hf_name, full host tensor in the parameter dtype) for every
// parameter, in registration order. Collective over the tp group: every tp
// rank must call it; every rank receives every tensor.
void export_hf_weights(ParamStore& store, TensorParallel& tp,
                       const std::function<void(const std::string&, const Tensor&)>& sink);

// This rank's part of a full tensor, as the parameter's local shape (host, in
// the full tensor's dtype; vocabulary padding rows zero).
Tensor shard_of_full(const Parameter& p, const Tensor& full);

}  // namespace bb
