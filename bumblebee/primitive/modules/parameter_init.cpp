// Shard-local, multi-threaded normal initialisation (parameter_init.h).
#include "bumblebee/primitive/modules/parameter_init.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "bumblebee/core/rng.h"

namespace bb {
namespace {

// Threads only pay off on big tensors; the values do not depend on their number.
constexpr int64_t kElementsPerThread = int64_t(1) << 20;

int64_t host_threads() { return std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency())); }

// Fills local rows [begin, end) of `out` ([local rows, local cols]).
template <class T>
void draw_rows(const Parameter& p, const Generator& gen, double std, int64_t begin, int64_t end, int64_t local_cols,
               T* out) {
  const int64_t full_cols = shape_numel(p.full_shape) / p.full_shape[0];
  for (int64_t r = begin; r < end; ++r) {
    T* row = out + r * local_cols;
    int64_t full_row = r, first_col = 0;
    if (p.shard == ShardKind::Column || p.shard == ShardKind::Vocab) {
      if (r >= p.shard_valid) {   // vocabulary padding
        std::fill(row, row + local_cols, T(0));
        continue;
      }
      full_row = p.shard_begin + r;
    } else if (p.shard == ShardKind::Row) {
      first_col = p.shard_begin;
    }
    const uint64_t base = uint64_t(full_row * full_cols + first_col);
    for (int64_t c = 0; c < local_cols; ++c) row[c] = T(std * gen.normal_at(base + uint64_t(c)));
  }
}

// The host tensor of init_normal_shard, its rows spread over up to max_threads threads.
Tensor draw_normal_host(const Parameter& p, uint64_t seed, double std, int64_t max_threads) {
  const Generator gen(seed);
  const Shape& local = p.local_shape;
  const int64_t rows = local.empty() ? 1 : local[0];
  const int64_t cols = rows == 0 ? 0 : shape_numel(local) / rows;
  // Drawn in float64 for float64 parameters, float32 otherwise (then cast once).
  const DType host_dtype = p.value.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor host = Tensor::empty(local, host_dtype);
  const int64_t n_threads = std::clamp<int64_t>(shape_numel(local) / kElementsPerThread, 1, std::min<int64_t>(max_threads, rows));
  auto draw = [&](int64_t begin, int64_t end) {
    if (host_dtype == DType::F64)
      draw_rows(p, gen, std, begin, end, cols, host.data<double>());
    else
      draw_rows(p, gen, std, begin, end, cols, host.data<float>());
  };
  if (n_threads == 1) {
    draw(0, rows);
  } else {
    std::vector<std::thread> workers;
    const int64_t per = (rows + n_threads - 1) / n_threads;
    for (int64_t t = 0; t < n_threads; ++t) {
      const int64_t begin = t * per, end = std::min(rows, begin + per);
      if (begin < end) workers.emplace_back(draw, begin, end);
    }
    for (std::thread& w : workers) w.join();
  }
  return host;
}

}  // namespace

void init_normal_shard(Parameter& p, uint64_t seed, double std) {
  p.value.copy_from(draw_normal_host(p, seed, std, host_threads()));
}

void init_normal_shards(const std::vector<NormalInit>& inits, double std) {
  const int64_t hw = host_threads();
  // Host buffers of at most 2^28 elements (1 GiB of float32) at a time.
  constexpr int64_t kBatchElements = int64_t(1) << 28;
  auto numel = [&](size_t k) { return shape_numel(inits[k].p->local_shape); };
  for (size_t i = 0; i < inits.size();) {
    if (numel(i) >= kElementsPerThread * hw) {   // big enough to spread its own rows over every thread
      init_normal_shard(*inits[i].p, inits[i].seed, std);
      ++i;
      continue;
    }
    size_t end = i + 1;
    for (int64_t elements = numel(i); end < inits.size() && numel(end) < kElementsPerThread * hw &&
                                      elements + numel(end) <= kBatchElements;
         ++end)
      elements += numel(end);
    std::vector<Tensor> hosts(end - i);
    std::atomic<size_t> next{i};
    std::vector<std::thread> workers;
    for (int64_t t = 0; t < std::min<int64_t>(hw, int64_t(end - i)); ++t)
      workers.emplace_back([&] {
        for (size_t k = next++; k < end; k = next++)
          hosts[k - i] = draw_normal_host(*inits[k].p, inits[k].seed, std, 1);
      });
    for (std::thread& w : workers) w.join();
    for (size_t k = i; k < end; ++k) inits[k].p->value.copy_from(hosts[k - i]);
    i = end;
  }
}

}  // namespace bb

namespace bb {

void init_kaiming_uniform_shard(Parameter& p, uint64_t seed) {
  BB_CHECK(p.full_shape.size() == 2 && (p.shard == ShardKind::Replicated || p.shard == ShardKind::Row),
           "kaiming-uniform init of '", p.name, "' needs a replicated or row-split matrix");
  const int64_t rows = p.full_shape[0], cols = p.full_shape[1];
  const double bound = 1.0 / std::sqrt(double(cols));
  Tensor full = Tensor::empty(p.full_shape, DType::F64);
  Generator(seed).fill_uniform(full, -bound, bound);
  Tensor local = Tensor::empty(p.local_shape, DType::F64);
  const int64_t local_cols = p.local_shape[1];
  const double* src = full.data<double>();
  double* dst = local.data<double>();
  for (int64_t r = 0; r < rows; ++r)
    std::copy(src + r * cols + p.shard_begin * (p.shard == ShardKind::Row),
              src + r * cols + p.shard_begin * (p.shard == ShardKind::Row) + local_cols, dst + r * local_cols);
  p.value.copy_from(local);
}

}  // namespace bb
