// What the files of the op surface (ops_*.cpp, declared in ops.h) share:
// the argument checks that read no tensor data on the device, and the
// dispatch macros that hand a call to ops/cpu or ops/cuda as one line of the
// op profile.
//
// Each op checks what it can without a device read: that its tensors are
// defined, live on one device, have the documented shapes, and that index
// tensors hold int32/int64. The CPU dtype rule (one floating dtype per call)
// is checked here; the CUDA backend checks its own mixed-precision rules
// (bf16 activations, fp32 statistics and gradients), which only it knows in
// detail.
#pragma once

#include <initializer_list>
#include <string>

#include "bumblebee/core/tensor.h"
#include "bumblebee/ops/cpu/cpu_ops.h"
#include "bumblebee/ops/op_profile.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/ops/cuda/cuda_ops.h"
#endif

namespace bb::ops {

struct Arg {
  const Tensor& t;
  const char* name;
};

// The device every tensor of the call lives on.
Device common_device(const char* op, std::initializer_list<Arg> args);

void expect_dim(const char* op, const Tensor& t, const char* name, int64_t dim);
void expect_shape(const char* op, const Tensor& t, const char* name, const Shape& shape);
// Every tensor of `args` has `shape` (a row's statistics, say).
void expect_shape(const char* op, const Shape& shape, std::initializer_list<Arg> args);
void expect_index(const char* op, const Tensor& t, const char* name);
void expect_cpu_float(const char* op, const Arg& a);

// CPU rule: every floating tensor of one call has the same dtype.
void expect_cpu_same_float(const char* op, std::initializer_list<Arg> args);

[[noreturn]] void no_cuda_build(const std::string& op);

}  // namespace bb::ops

// Each backend call is one line of the op profile (op_profile.h): `label`
// names it (built only while profiling), `first` is a tensor of the call,
// whose device says where to time it. The CUDA backend mirrors every op under
// the same name and parameters.
#define BB_TIMED(first, label, call)                                                                        \
  {                                                                                                         \
    profile::Scope bb_op_scope_((first).device(), profile::enabled() ? std::string(label) : std::string()); \
    return call;                                                                                            \
  }
#define BB_DISPATCH_CPU(fn, first, ...) BB_TIMED(first, #fn, cpu::fn(first __VA_OPT__(, ) __VA_ARGS__))
#ifdef BB_WITH_CUDA
#define BB_DISPATCH_CUDA(fn, first, ...) BB_TIMED(first, #fn, cuda::fn(first __VA_OPT__(, ) __VA_ARGS__))
#define BB_TIMED_CUDA(first, label, call) BB_TIMED(first, label, call)
#else
#define BB_DISPATCH_CUDA(fn, ...) no_cuda_build(#fn)
#define BB_TIMED_CUDA(first, label, call) no_cuda_build(label)
#endif
