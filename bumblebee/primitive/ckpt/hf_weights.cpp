// Shards of full HF tensors and their gathering.
#include "bumblebee/primitive/ckpt/hf_weights.h"

#include <cstring>

namespace bb {

namespace {
// Index of the first element whose exponent bits are all ones (Inf or NaN),
// or -1. Reads the stored bits, so no element is converted.
template <typename Bits>
int64_t first_non_finite(const Tensor& t, Bits exponent_mask) {
  const auto* p = static_cast<const Bits*>(t.raw());
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i)
    if ((p[i] & exponent_mask) == exponent_mask) return i;
  return -1;
}
}  // namespace

void check_loadable_weight(const std::string& hf_name, const Tensor& full) {
  BB_CHECK(is_floating(full.dtype()), "checkpoint tensor '", hf_name, "' is stored as ", dtype_name(full.dtype()),
           ", but it fills a floating-point parameter (integer weights are not cast)");
  int64_t bad = -1;
  switch (full.dtype()) {
    case DType::F64: bad = first_non_finite<uint64_t>(full, 0x7ff0000000000000ull); break;
    case DType::F32: bad = first_non_finite<uint32_t>(full, 0x7f800000u); break;
    case DType::BF16: bad = first_non_finite<uint16_t>(full, uint16_t(0x7f80)); break;
    case DType::F16: bad = first_non_finite<uint16_t>(full, uint16_t(0x7c00)); break;
    default: break;
  }
  if (bad >= 0)
    BB_FAIL("checkpoint tensor '", hf_name, "' holds a non-finite value (", full.flat_slice(bad, {1}).item(),
            ") at element ", bad, " of shape ", shape_str(full.shape()));
}

Tensor shard_of_full(const Parameter& p, const Tensor& full) {
  // Byte copies in the checkpoint's dtype: exact, and no float64 copy of an
  // 8B model's tensors; the caller's copy_from casts once.
  const Tensor src = full.to(Device::cpu());
  Tensor local = Tensor::zeros(p.local_shape, src.dtype());
  const size_t es = dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(local.raw());
  if (p.shard == ShardKind::Row) {
    const int64_t rows = p.full_shape[0], cols = p.full_shape[1], lc = p.local_shape[1];
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(d + size_t(r * lc) * es, s + size_t(r * cols + p.shard_begin) * es, size_t(lc) * es);
  } else if (p.shard == ShardKind::Replicated) {
    std::memcpy(d, s, src.nbytes());
  } else {
    const int64_t row = shape_numel(p.full_shape) / p.full_shape[0];
    std::memcpy(d, s + size_t(p.shard_begin * row) * es, size_t(p.shard_valid * row) * es);
  }
  return local;
}

Tensor gather_full(const Parameter& p, TensorParallel& tp) {
  const int n = tp.size();
  if (p.shard == ShardKind::Replicated || n == 1)
    return p.shard == ShardKind::Vocab ? p.value.narrow(0, p.full_shape[0]) : p.value;
  Shape gathered_shape = p.local_shape;
  gathered_shape[0] *= n;
  Tensor gathered = Tensor::empty(gathered_shape, p.value.dtype(), p.value.device());
  tp.group().all_gather(p.value, gathered);
  if (p.shard != ShardKind::Row) return gathered.narrow(0, p.full_shape[0]);
  // Rank parts are [rows, cols/n] blocks stacked along dim 0; interleave them
  // back into columns. On the host: tp > 1 row-parallel weights take this
  // round trip, the rest of an export stays on the device.
  const Tensor host = gathered.to(Device::cpu());
  const int64_t rows = p.full_shape[0], lc = p.local_shape[1];
  const size_t es = dtype_size(host.dtype());
  Tensor full = Tensor::empty(p.full_shape, host.dtype());
  const char* s = static_cast<const char*>(host.raw());
  char* d = static_cast<char*>(full.raw());
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy(s + ((r * rows + i) * lc) * es, s + ((r * rows + i) * lc + lc) * es, d + (i * lc * n + r * lc) * es);
  return full.to(p.value.device());
}

}  // namespace bb
