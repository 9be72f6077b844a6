// Shards of full HF tensors and their gathering.
#include "bumblebee/primitive/ckpt/hf_weights.h"

#include <cstring>

namespace bb {

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
  if (p.shard == ShardKind::Replicated || n == 1) {
    Tensor full = p.value.to(Device::cpu());
    if (p.shard == ShardKind::Vocab) full = full.narrow(0, p.full_shape[0]).clone();
    return full;
  }
  Shape gathered_shape = p.local_shape;
  gathered_shape[0] *= n;
  Tensor gathered = Tensor::empty(gathered_shape, p.value.dtype(), p.value.device());
  tp.group().all_gather(p.value, gathered);
  Tensor host = gathered.to(Device::cpu());
  if (p.shard != ShardKind::Row) return host.narrow(0, p.full_shape[0]).clone();
  // Rank parts are [rows, cols/n] blocks stacked along dim 0; interleave them back into columns.
  const int64_t rows = p.full_shape[0], lc = p.local_shape[1];
  const size_t es = dtype_size(host.dtype());
  Tensor full = Tensor::empty(p.full_shape, host.dtype());
  const char* s = static_cast<const char*>(host.raw());
  char* d = static_cast<char*>(full.raw());
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < rows; ++i)
      std::copy(s + ((r * rows + i) * lc) * es, s + ((r * rows + i) * lc + lc) * es, d + (i * lc * n + r * lc) * es);
  return full;
}

}  // namespace bb
