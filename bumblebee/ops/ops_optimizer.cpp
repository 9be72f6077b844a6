// The optimizer ops of ops.h: argument checks, then the backend.
#include "bumblebee/ops/ops.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {
namespace {

// The storage combinations adamw_step takes (ops.h); each backend kernel
// covers exactly these.
void check_adamw_dtypes(const char* op, const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, bool cpu) {
  const auto in = [](DType dt, std::initializer_list<DType> allowed) {
    return std::find(allowed.begin(), allowed.end(), dt) != allowed.end();
  };
  const auto names = [&] {
    return std::string(" (param ") + dtype_name(param.dtype()) + ", grad " + dtype_name(grad.dtype()) + ", exp_avg " +
           dtype_name(exp_avg.dtype()) + ", exp_avg_sq " + dtype_name(exp_avg_sq.dtype()) + ")";
  };
  if (param.dtype() == DType::F64) {
    BB_CHECK(exp_avg.dtype() == DType::F64 && exp_avg_sq.dtype() == DType::F64 &&
                 (grad.dtype() == DType::F64 || (!cpu && grad.dtype() == DType::F32)),
             op, ": a float64 param steps with float64 moments and a float64 gradient", cpu ? "" : " (or float32)",
             names());
    return;
  }
  BB_CHECK(in(param.dtype(), {DType::F32, DType::BF16}), op, ": param must be float64, float32 or bfloat16", names());
  for (const auto& [t, name] : {std::pair{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}})
    BB_CHECK(in(t->dtype(), {DType::F32, DType::BF16}), op, ": with a ", dtype_name(param.dtype()), " param, ", name,
             " must be float32 or bfloat16", names());
}

}  // namespace

void adamw_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamWParams& hp) {
  const char* op = "adamw_step";
  const Device dev = common_device(
      op, {{param, "param"}, {grad, "grad"}, {exp_avg, "exp_avg"}, {exp_avg_sq, "exp_avg_sq"}});
  expect_shape(op, grad, "grad", param.shape());
  expect_shape(op, exp_avg, "exp_avg", param.shape());
  expect_shape(op, exp_avg_sq, "exp_avg_sq", param.shape());
  BB_CHECK(hp.step >= 1, op, ": step is 1-based (counted after the increment), got ", hp.step);
  BB_CHECK(hp.beta1 >= 0.0 && hp.beta1 < 1.0 && hp.beta2 >= 0.0 && hp.beta2 < 1.0, op,
           ": betas must lie in [0, 1), got (", hp.beta1, ", ", hp.beta2, ")");
  BB_CHECK(hp.lr >= 0.0 && hp.eps >= 0.0 && hp.weight_decay >= 0.0, op,
           ": lr, eps and weight_decay must be non-negative, got lr=", hp.lr, " eps=", hp.eps,
           " weight_decay=", hp.weight_decay);
  BB_CHECK(std::isfinite(hp.grad_scale), op, ": grad_scale is not finite (", hp.grad_scale, ")");
  check_adamw_dtypes(op, param, grad, exp_avg, exp_avg_sq, dev.is_cpu());
  if (dev.is_cpu()) {
    BB_DISPATCH_CPU(adamw_step, param, grad, exp_avg, exp_avg_sq, hp);
  }
  BB_DISPATCH_CUDA(adamw_step, param, grad, exp_avg, exp_avg_sq, hp);
}

}  // namespace bb::ops
