// Fuzz target: a sharded training checkpoint's state/metadata.json through
// check_sharded_metadata, the validation ShardedCheckpoint::open runs (file names
// inside the folder, pieces inside their tensor's shape, no overlaps, full
// coverage, listed files). Text that is not JSON is rejected before it, as
// open's reader does. A bb::Error is a clean rejection; anything else is a finding.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/primitive/ckpt/sharded_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json metadata;
  try {
    metadata = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    bb::check_sharded_metadata(metadata, "fuzz/metadata.json");
  } catch (const bb::Error&) {
  }
  return 0;
}
