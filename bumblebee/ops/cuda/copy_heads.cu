// The heads of an ops::HeadsView (v inside a fused qkv) copied out of their
// wider rows and back in: one cudaMemcpy2DAsync each way, tokens as the rows
// of the copy, on the backend's current stream. A copy of whole heads is
// exact in every dtype, so no kernel of ours is needed.
#include "bumblebee/ops/cuda/cuda_common.cuh"
#include "bumblebee/ops/cuda/cuda_ops.h"

namespace bb::cuda {
namespace {

// rows of `width` bytes, src_pitch and dst_pitch bytes apart.
void copy_rows(const void* src, size_t src_pitch, void* dst, size_t dst_pitch, size_t width,
               size_t rows, const Tensor& on) {
  if (rows == 0 || width == 0) return;
  DeviceGuard guard(on.device().index);
  CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDeviceToDevice,
                               current_stream()));
}

// The bytes of a view's heads in one token, and between tokens.
size_t block_bytes(const ops::HeadsView& v) { return size_t(v.count * v.all.size(2)) * dtype_size(v.all.dtype()); }
size_t row_bytes(const ops::HeadsView& v) { return size_t(v.all.size(1) * v.all.size(2)) * dtype_size(v.all.dtype()); }
char* first_byte(const ops::HeadsView& v) {
  return static_cast<char*>(v.all.raw()) + size_t(v.first * v.all.size(2)) * dtype_size(v.all.dtype());
}

}  // namespace

void copy_heads(const ops::HeadsView& src, Tensor& dst) {
  const char* op = "copy_heads";
  check_cuda(src.all, op, "src");
  check_cuda_same(src.all, dst, op, "dst");
  copy_rows(first_byte(src), row_bytes(src), dst.raw(), block_bytes(src), block_bytes(src),
            size_t(src.all.size(0)), dst);
}

void copy_heads(const Tensor& src, const ops::HeadsView& dst) {
  const char* op = "copy_heads";
  check_cuda(src, op, "src");
  check_cuda_same(src, dst.all, op, "dst");
  copy_rows(src.raw(), block_bytes(dst), first_byte(dst), row_bytes(dst), block_bytes(dst),
            size_t(dst.all.size(0)), src);
}

}  // namespace bb::cuda
