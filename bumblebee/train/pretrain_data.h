// Pretraining data: fixed-length GPT samples from Megatron indexed datasets, blended by weight.
//
// Each dataset's documents are split into contiguous train and valid ranges
// (data.split); each range becomes a GPTDataset shuffled by train.seed (valid:
// seed + 1), and several datasets are mixed by BlendedDataset. A sample of
// seq_len + 1 tokens becomes one sequence of the PackedBatch, so it is scored
// at seq_len positions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bumblebee/train/train_data.h"

namespace bb::train {

std::unique_ptr<TrainData> make_pretrain_data(const std::vector<std::string>& prefixes,
                                              const std::vector<double>& weights, const DataRecipe& data,
                                              const TrainRecipe& train, int64_t vocab_size, DataRank dp);

}  // namespace bb::train
