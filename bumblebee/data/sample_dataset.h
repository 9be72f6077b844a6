// SampleDataset: anything that yields numbered fixed-length token samples (GPT, blended).
#pragma once

#include <cstdint>
#include <vector>

namespace bb {

class SampleDataset {
 public:
  virtual ~SampleDataset() = default;
  virtual int64_t size() const = 0;
  // Sample i in [0, size()): seq_len + 1 tokens (inputs and, shifted by one, labels).
  virtual std::vector<int64_t> sample(int64_t i) const = 0;
  virtual int64_t seq_len() const = 0;
};

}  // namespace bb
