// LoRA dropout: microbatch keys, per-adapter masks and their application.
#include "bumblebee/primitive/modules/lora_dropout.h"

#include "bumblebee/ops/dropout.h"
#include "bumblebee/ops/ops.h"

namespace bb {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// FNV-1a: a stable hash of the adapter's name, so a run's masks do not depend
// on the standard library's std::hash.
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

Tensor mask_for(const Tensor& like, double p, const LoraDropout& drop, const std::string& adapter,
                int64_t in_features, int64_t col_offset) {
  Tensor mask = Tensor::empty(like.shape(), like.dtype(), like.device());
  ops::dropout_mask(mask, mix(drop.key, name_hash(adapter)), in_features, col_offset, p);
  return mask;
}
}  // namespace

uint64_t lora_dropout_key(uint64_t seed, int64_t step, int64_t microbatch, int dp_rank, int cp_rank) {
  uint64_t h = mix(0x6c6f72612d64726full, seed);
  h = mix(h, uint64_t(step));
  h = mix(h, uint64_t(microbatch));
  h = mix(h, uint64_t(dp_rank));
  return mix(h, uint64_t(cp_rank));
}

Tensor lora_dropout_input(const Tensor& x, double p, const LoraDropout& drop, const std::string& adapter,
                          int64_t in_features, int64_t col_offset) {
  Tensor out = mask_for(x, p, drop, adapter, in_features, col_offset);
  ops::mul(x, out, out);
  return out;
}

void lora_dropout_backward(Tensor& dx, double p, const LoraDropout& drop, const std::string& adapter,
                           int64_t in_features, int64_t col_offset) {
  ops::mul(dx, mask_for(dx, p, drop, adapter, in_features, col_offset), dx);
}

}  // namespace bb
