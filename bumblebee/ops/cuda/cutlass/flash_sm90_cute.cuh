// CuTe in the sm_90a flash attention kernels: the headers the traits of both
// directions build on, and the names they use unqualified.
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

}  // namespace bb::cuda::flash_sm90
