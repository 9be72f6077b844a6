// CuTe in the sm_90a flash attention kernels: the headers the traits of both
// directions build on, the names they use unqualified, and the roles of their
// TMA pipelines.
#pragma once

#include <cute/tensor.hpp>  // first: the atom headers below assume it

#include <cute/arch/mma_sm90.hpp>
#include <cute/atom/copy_traits_sm90_tma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/pipeline/sm90_pipeline.hpp>

namespace bb::cuda::flash_sm90 {

// bb has its own Shape and Tensor, which unqualified lookup would find before
// names the using-directive brings in; these declarations put cute's first.
using namespace cute;
using cute::Layout;
using cute::Shape;
using cute::Step;
using cute::Stride;
using cute::Tensor;

// A TMA pipeline's parameters in a block whose warpgroup 0 produces (thread 0
// issues the copies) and whose `consumer_threads` threads after it consume;
// the caller sets the transaction bytes.
template <class Pipeline>
__device__ __forceinline__ typename Pipeline::Params pipeline_roles(int warp_group, int consumer_threads) {
  typename Pipeline::Params pipe;
  pipe.role = warp_group == 0 ? Pipeline::ThreadCategory::Producer : Pipeline::ThreadCategory::Consumer;
  pipe.is_leader = threadIdx.x == 0;
  pipe.num_consumers = consumer_threads;
  return pipe;
}

}  // namespace bb::cuda::flash_sm90
