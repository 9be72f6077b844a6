// Fuzz target: model.safetensors.index.json through parse_hf_checkpoint_index, the
// parser HFCheckpoint::open uses. A bb::Error is a clean rejection; anything else
// (another exception, a crash, a sanitizer report, a leak, a timeout) is a finding.
#include <cstdint>
#include <string>

#include "bumblebee/core/error.h"
#include "bumblebee/primitive/ckpt/hf_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    bb::parse_hf_checkpoint_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz.index.json");
  } catch (const bb::Error&) {
  }
  return 0;
}
