// TrainData: the batches of a training run as one dp rank sees them.
//
// A global batch is train.micro_batch_size x train.num_microbatches x dp
// sequences (sft: packed rows); train_batch(step) is this rank's contiguous
// share of global batch `step`, handed to forward_backward whole (the runtime
// splits it into microbatches). Validation uses the same train.eval_batches
// global batches of held-out documents every time, so its curve is comparable
// from one evaluation to the next.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/runtime/packed_batch.h"
#include "bumblebee/train/recipe.h"

namespace bb::train {

class TrainData {
 public:
  virtual ~TrainData() = default;
  virtual PackedBatch train_batch(int64_t step) const = 0;
  const std::vector<PackedBatch>& valid_batches() const { return valid_batches_; }
  // One line saying what the data is (sizes of the splits, epochs), for the log.
  const std::string& description() const { return description_; }

 protected:
  std::vector<PackedBatch> valid_batches_;
  std::string description_;
};

// Where this rank stands in the data-parallel group.
struct DataRank {
  int rank = 0;
  int size = 1;
};

// Builds the data the recipe asks for. A data.jsonl is tokenised first into
// `output_dir`/data/ (by world rank 0; the others wait at a barrier). Tokens
// outside [0, vocab_size) are a bb::Error. `log` receives progress lines.
std::unique_ptr<TrainData> make_train_data(const Recipe& recipe, const std::string& output_dir, int64_t vocab_size,
                                           DataRank dp, const std::function<void(const std::string&)>& log);

}  // namespace bb::train
