// Fuzz target: a safetensors file (header length, JSON header, data section) through
// SafetensorsFile::parse, the validation open() runs on the file it maps, then every
// accepted tensor read back. A bb::Error is a clean rejection; anything else (another
// exception, a crash, a sanitizer report, a leak, a timeout) is a finding.
#include <cstdint>
#include <memory>
#include <string>

#include "bumblebee/core/error.h"
#include "bumblebee/primitive/ckpt/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  try {
    const bb::SafetensorsFile f = bb::SafetensorsFile::parse(bytes, bytes->data(), bytes->size(), "fuzz.safetensors");
    for (const std::string& name : f.names()) {
      f.shape(name);
      f.stored_dtype(name);
      f.nbytes(name);
      try {
        bb::Tensor t = f.get(name);   // a bb::Error for format dtypes Tensor cannot hold
      } catch (const bb::Error&) {
      }
    }
  } catch (const bb::Error&) {
  }
  return 0;
}
