// Fuzz target: a Megatron PREFIX.idx through parse_indexed_dataset_index, the
// validation IndexedDataset's constructor runs on the mapped file. A bb::Error is a
// clean rejection; anything else (another exception, a crash, a sanitizer report, a
// leak, a timeout) is a finding.
#include <cstdint>

#include "bumblebee/core/error.h"
#include "bumblebee/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    bb::parse_indexed_dataset_index(reinterpret_cast<const char*>(data), size, "fuzz.idx");
  } catch (const bb::Error&) {
  }
  return 0;
}
