// Fuzz target: an HF config.json through parse_dense_hf_config (what the Llama and
// Qwen3 protocols' build_model_config run), with and without q/k norm, and the
// normalised config read back. Text that is not JSON is left out: the runtime's
// read_json_file rejects it before any model code sees it. A bb::Error is a clean
// rejection; anything else (another exception such as nlohmann's type_error, a crash,
// a sanitizer report, a leak, a timeout) is a finding.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bumblebee/core/error.h"
#include "bumblebee/model/dense/dense_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json hf = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (hf.is_discarded()) return 0;
  for (bool qk_norm : {false, true}) {
    try {
      const bb::DenseConfig c = bb::parse_dense_hf_config(hf, qk_norm, nlohmann::json::object());
      bb::DenseConfig::from_json(c.to_json());
    } catch (const bb::Error&) {
    }
  }
  return 0;
}
