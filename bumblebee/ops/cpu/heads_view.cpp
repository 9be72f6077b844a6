// CPU head ranges (ops::HeadsView: q, k or v inside a fused qkv): the heads
// copied out of and into their wider rows, and the head-range RoPE and
// RMSNorm + RoPE ops as the contiguous ops on the heads copied out. So the
// oracle's head-range results are by construction the contiguous ops' bits,
// which the CUDA kernels (reading and writing through the row stride) are
// compared against.
#include <cstring>

#include "bumblebee/ops/cpu/cpu_ops.h"

namespace bb::cpu {
namespace {

// One token's heads, contiguous in the view: `count * D` elements from head
// `first` of a row of `heads * D`.
struct HeadBlock {
  size_t row_bytes, offset_bytes, block_bytes;
};

HeadBlock head_block(const ops::HeadsView& v) {
  const size_t head_bytes = size_t(v.all.size(2)) * dtype_size(v.all.dtype());
  return {size_t(v.all.size(1)) * head_bytes, size_t(v.first) * head_bytes, size_t(v.count) * head_bytes};
}

// A [N, count, D] tensor holding the heads of v.
Tensor heads_copy(const ops::HeadsView& v) {
  Tensor out = Tensor::empty({v.all.size(0), v.count, v.all.size(2)}, v.all.dtype(), v.all.device());
  cpu::copy_heads(v, out);
  return out;
}

}  // namespace

void copy_heads(const ops::HeadsView& src, Tensor& dst) {
  const HeadBlock b = head_block(src);
  const char* from = static_cast<const char*>(src.all.raw()) + b.offset_bytes;
  char* to = static_cast<char*>(dst.raw());
  for (int64_t t = 0; t < src.all.size(0); ++t) {
    std::memcpy(to + t * b.block_bytes, from + t * b.row_bytes, b.block_bytes);
  }
}

void copy_heads(const Tensor& src, const ops::HeadsView& dst) {
  const HeadBlock b = head_block(dst);
  const char* from = static_cast<const char*>(src.raw());
  char* to = static_cast<char*>(dst.all.raw()) + b.offset_bytes;
  for (int64_t t = 0; t < dst.all.size(0); ++t) {
    std::memcpy(to + t * b.row_bytes, from + t * b.block_bytes, b.block_bytes);
  }
}

void rope_forward(const ops::HeadsView& x, const Tensor& position_ids, const Tensor& inv_freq, Tensor& out) {
  cpu::rope_forward(heads_copy(x), position_ids, inv_freq, out);
}

void rope_backward(const Tensor& dy, const Tensor& position_ids, const Tensor& inv_freq, const ops::HeadsView& dx) {
  Tensor d = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
  cpu::rope_backward(dy, position_ids, inv_freq, d);
  cpu::copy_heads(d, dx);
}

void rmsnorm_rope_forward(const ops::HeadsView& x, const Tensor& w, double eps, const Tensor& position_ids,
                          const Tensor& inv_freq, Tensor& y, Tensor& rstd) {
  cpu::rmsnorm_rope_forward(heads_copy(x), w, eps, position_ids, inv_freq, y, rstd);
}

void rmsnorm_rope_backward(const Tensor& dy, const ops::HeadsView& x, const Tensor& w, const Tensor& rstd,
                           const Tensor& position_ids, const Tensor& inv_freq, const ops::HeadsView& dx, Tensor& dw) {
  Tensor d = Tensor::empty(dy.shape(), dx.all.dtype(), dy.device());
  cpu::rmsnorm_rope_backward(dy, heads_copy(x), w, rstd, position_ids, inv_freq, d, dw);
  cpu::copy_heads(d, dx);
}

}  // namespace bb::cpu
