// Fuzz target: a bb-train recipe through recipe_from_text, what load_recipe runs on the
// file's text (run from the repository root, so model.hf_path=configs/qwen3-tiny exists).
// A bb::Error is a clean rejection; anything else (another exception, a crash, a
// sanitizer report, a leak, a timeout) is a finding.
#include <cstdint>
#include <string>

#include "bumblebee/core/error.h"
#include "bumblebee/train/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    bb::train::recipe_from_text(std::string(reinterpret_cast<const char*>(data), size), "fuzz recipe.json", {});
  } catch (const bb::Error&) {
  }
  return 0;
}
