// The cross-entropy ops of ops.h: argument checks, then the backend.
#include "bumblebee/ops/ops.h"

#include "bumblebee/ops/op_dispatch.h"

namespace bb::ops {
namespace {

// The softmax statistics' tensors: logits [T, V], and labels (int32/int64),
// row_max, sumexp and target_logit a value a row; on the CPU one float dtype.
void check_softmax_stats(const char* op, const Tensor& logits, const Tensor& labels, const Tensor& row_max,
                         const Tensor& sumexp, const Tensor& target_logit, Device dev) {
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, rows,
               {{labels, "labels"}, {row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}});
  expect_index(op, labels, "labels");
  if (dev.is_cpu())
    expect_cpu_same_float(
        op, {{logits, "logits"}, {row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}});
}

}  // namespace

void logits_row_max(const Tensor& logits, Tensor& row_max) {
  const char* op = "logits_row_max";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, row_max, "row_max", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {row_max, "row_max"}});
    BB_DISPATCH_CPU(logits_row_max, logits, row_max);
  }
  BB_DISPATCH_CUDA(logits_row_max, logits, row_max);
}

void logits_sumexp_target(const Tensor& logits, const Tensor& row_max, const Tensor& labels, int64_t vocab_start,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_sumexp_target";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}, {labels, "labels"},
                                        {sumexp, "sumexp"}, {target_logit, "target_logit"}});
  check_softmax_stats(op, logits, labels, row_max, sumexp, target_logit, dev);
  if (dev.is_cpu()) BB_DISPATCH_CPU(logits_sumexp_target, logits, row_max, labels, vocab_start, sumexp, target_logit);
  BB_DISPATCH_CUDA(logits_sumexp_target, logits, row_max, labels, vocab_start, sumexp, target_logit);
}

void logits_softmax_stats(const Tensor& logits, const Tensor& labels, int64_t vocab_start, Tensor& row_max,
                          Tensor& sumexp, Tensor& target_logit) {
  const char* op = "logits_softmax_stats";
  const Device dev = common_device(op, {{logits, "logits"}, {labels, "labels"}, {row_max, "row_max"},
                                        {sumexp, "sumexp"}, {target_logit, "target_logit"}});
  check_softmax_stats(op, logits, labels, row_max, sumexp, target_logit, dev);
  if (dev.is_cpu()) BB_DISPATCH_CPU(logits_softmax_stats, logits, labels, vocab_start, row_max, sumexp, target_logit);
  BB_DISPATCH_CUDA(logits_softmax_stats, logits, labels, vocab_start, row_max, sumexp, target_logit);
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sumexp, const Tensor& target_logit, Tensor& lse,
                        Tensor& loss) {
  const char* op = "cross_entropy_loss";
  const Device dev = common_device(
      op, {{row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"}, {lse, "lse"}, {loss, "loss"}});
  expect_dim(op, row_max, "row_max", 1);
  expect_shape(op, row_max.shape(), {{sumexp, "sumexp"}, {target_logit, "target_logit"}, {lse, "lse"}, {loss, "loss"}});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{row_max, "row_max"}, {sumexp, "sumexp"}, {target_logit, "target_logit"},
                               {lse, "lse"}, {loss, "loss"}});
    BB_DISPATCH_CPU(cross_entropy_loss, row_max, sumexp, target_logit, lse, loss);
  }
  BB_DISPATCH_CUDA(cross_entropy_loss, row_max, sumexp, target_logit, lse, loss);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const Device dev = common_device(
      op, {{logits, "logits"}, {labels, "labels"}, {lse, "lse"}, {dloss, "dloss"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, rows, {{labels, "labels"}, {lse, "lse"}, {dloss, "dloss"}});
  expect_index(op, labels, "labels");
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {dloss, "dloss"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(cross_entropy_backward, logits, labels, vocab_start, lse, dloss, dlogits);
  }
  BB_DISPATCH_CUDA(cross_entropy_backward, logits, labels, vocab_start, lse, dloss, dlogits);
}

void logits_zexp_sum(const Tensor& logits, const Tensor& row_max, Tensor& zexp_sum) {
  const char* op = "logits_zexp_sum";
  const Device dev = common_device(op, {{logits, "logits"}, {row_max, "row_max"}, {zexp_sum, "zexp_sum"}});
  expect_dim(op, logits, "logits", 2);
  expect_shape(op, row_max, "row_max", {logits.size(0)});
  expect_shape(op, zexp_sum, "zexp_sum", {logits.size(0)});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {row_max, "row_max"}, {zexp_sum, "zexp_sum"}});
    BB_DISPATCH_CPU(logits_zexp_sum, logits, row_max, zexp_sum);
  }
  BB_DISPATCH_CUDA(logits_zexp_sum, logits, row_max, zexp_sum);
}

void entropy_from_sums(const Tensor& lse, const Tensor& sumexp, const Tensor& zexp_sum, Tensor& entropy) {
  const char* op = "entropy_from_sums";
  const Device dev =
      common_device(op, {{lse, "lse"}, {sumexp, "sumexp"}, {zexp_sum, "zexp_sum"}, {entropy, "entropy"}});
  expect_dim(op, lse, "lse", 1);
  expect_shape(op, lse.shape(), {{sumexp, "sumexp"}, {zexp_sum, "zexp_sum"}, {entropy, "entropy"}});
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{lse, "lse"}, {sumexp, "sumexp"}, {zexp_sum, "zexp_sum"}, {entropy, "entropy"}});
    BB_DISPATCH_CPU(entropy_from_sums, lse, sumexp, zexp_sum, entropy);
  }
  BB_DISPATCH_CUDA(entropy_from_sums, lse, sumexp, zexp_sum, entropy);
}

void cross_entropy_entropy_backward(const Tensor& logits, const Tensor& labels, int64_t vocab_start, const Tensor& lse,
                                    const Tensor& entropy, const Tensor& dloss, const Tensor& dentropy,
                                    Tensor& dlogits) {
  const char* op = "cross_entropy_entropy_backward";
  const Device dev = common_device(op, {{logits, "logits"}, {labels, "labels"}, {lse, "lse"}, {entropy, "entropy"},
                                        {dloss, "dloss"}, {dentropy, "dentropy"}, {dlogits, "dlogits"}});
  expect_dim(op, logits, "logits", 2);
  const Shape rows{logits.size(0)};
  expect_shape(op, rows,
               {{labels, "labels"}, {lse, "lse"}, {entropy, "entropy"}, {dloss, "dloss"}, {dentropy, "dentropy"}});
  expect_index(op, labels, "labels");
  expect_shape(op, dlogits, "dlogits", logits.shape());
  if (dev.is_cpu()) {
    expect_cpu_same_float(op, {{logits, "logits"}, {lse, "lse"}, {entropy, "entropy"}, {dloss, "dloss"},
                               {dentropy, "dentropy"}, {dlogits, "dlogits"}});
    BB_DISPATCH_CPU(cross_entropy_entropy_backward, logits, labels, vocab_start, lse, entropy, dloss, dentropy,
                    dlogits);
  }
  BB_DISPATCH_CUDA(cross_entropy_entropy_backward, logits, labels, vocab_start, lse, entropy, dloss, dentropy,
                   dlogits);
}

}  // namespace bb::ops
