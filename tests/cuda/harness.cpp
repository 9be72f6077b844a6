// Paired CPU/CUDA tensors, poisoning and error measures for bb_cuda_ops.
#include "tests/cuda/harness.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "bumblebee/core/half.h"

namespace bb::harness {
namespace {

const Device kGpu = Device::cuda(0);

// The value the CUDA tensor will hold, so the CPU side can hold it too.
double round_through(double v, DType dt) {
  switch (dt) {
    case DType::BF16: return bf16_to_float(float_to_bf16(float(v)));
    case DType::F16: return f16_to_float(float_to_f16(float(v)));
    case DType::F32: return double(float(v));
    default: return v;
  }
}

Pair make_pair(std::vector<double> values, const Shape& shape, DType gpu_dtype) {
  for (double& v : values) v = round_through(v, gpu_dtype);
  Pair p;
  p.cpu = Tensor::from_doubles(values, shape, DType::F32);
  p.gpu = Tensor::from_doubles(values, shape, gpu_dtype).to(kGpu);
  return p;
}

}  // namespace

Pair random_pair(Generator& gen, const Shape& shape, DType gpu_dtype, double std) {
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = gen.normal() * std;
  return make_pair(std::move(v), shape, gpu_dtype);
}

Pair random_pair(Generator& gen, const Shape& shape, DType gpu_dtype, double lo, double hi) {
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * gen.uniform();
  return make_pair(std::move(v), shape, gpu_dtype);
}

Pair random_pair_with(Generator& gen, const Shape& shape, DType gpu_dtype,
                      const std::function<void(std::vector<double>&)>& edit) {
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = gen.normal();
  edit(v);
  return make_pair(std::move(v), shape, gpu_dtype);
}

Pair output_pair(const Shape& shape, DType gpu_dtype) {
  Pair p;
  p.cpu = Tensor::empty(shape, DType::F32);
  p.gpu = Tensor::empty(shape, gpu_dtype, kGpu);
  p.cpu.fill_(std::numeric_limits<double>::quiet_NaN());
  p.gpu.fill_(std::numeric_limits<double>::quiet_NaN());
  return p;
}

Pair index_pair(const std::vector<double>& values, DType dtype) {
  Pair p;
  p.cpu = Tensor::from_doubles(values, {int64_t(values.size())}, dtype);
  p.gpu = p.cpu.to(kGpu);
  return p;
}

Pair pair_from_cpu(const Tensor& cpu, DType gpu_dtype) { return make_pair(cpu.to_doubles(), cpu.shape(), gpu_dtype); }

Check compare(const std::string& name, const Pair& p, double bound) {
  const std::vector<double> a = p.gpu.to_doubles(), b = p.cpu.to_doubles();
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) return {name, std::numeric_limits<double>::infinity(), bound};
    const double d = a[i] - b[i];
    diff += d * d;
    ref += b[i] * b[i];
  }
  const double err = ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff);
  return {name, err, bound};
}

Check compare_scalar(const std::string& name, double gpu, double cpu, double bound) {
  if (!std::isfinite(gpu) && std::isfinite(cpu)) return {name, std::numeric_limits<double>::infinity(), bound};
  const double diff = std::fabs(gpu - cpu);
  return {name, std::fabs(cpu) > 0.0 ? diff / std::fabs(cpu) : diff, bound};
}

EnvOverride::EnvOverride(const char* name, const std::string& value) : name_(name) {
  if (const char* old = std::getenv(name)) {
    had_old_ = true;
    old_ = old;
  }
  setenv(name, value.c_str(), 1);
}

EnvOverride::~EnvOverride() {
  if (had_old_) setenv(name_.c_str(), old_.c_str(), 1);
  else unsetenv(name_.c_str());
}

std::string fmt(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

bool filter_matches(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  size_t start = 0;
  while (start <= filter.size()) {
    const size_t end = std::min(filter.find(',', start), filter.size());
    const std::string part = filter.substr(start, end - start);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    start = end + 1;
  }
  return false;
}

Tensor rope_inv_freq(int64_t dim, double base) {
  std::vector<double> f(size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) f[size_t(i)] = 1.0 / std::pow(base, double(2 * i) / double(dim));
  return Tensor::from_doubles(f, {dim / 2}, DType::F64);
}

std::string head_dims(int64_t head_dim_qk, int64_t head_dim_v) {
  return head_dim_v == head_dim_qk ? fmt("D=%lld", (long long)head_dim_qk)
                                   : fmt("D=%lld/%lld", (long long)head_dim_qk, (long long)head_dim_v);
}

int64_t AttentionShape::tokens() const {
  int64_t t = 0;
  for (int64_t l : seqlens) t += l;
  return t;
}

int64_t AttentionShape::max_seqlen() const {
  int64_t m = 0;
  for (int64_t l : seqlens) m = std::max(m, l);
  return m;
}

std::vector<double> AttentionShape::cu_seqlens() const {
  std::vector<double> cu{0.0};
  for (int64_t l : seqlens) cu.push_back(cu.back() + double(l));
  return cu;
}

double AttentionShape::scale() const { return 1.0 / std::sqrt(double(head_dim)); }

std::string attention_shape(const AttentionShape& a) {
  std::string lens;
  for (int64_t l : a.seqlens) lens += (lens.empty() ? "" : ",") + std::to_string(l);
  return fmt("seqs=[%s] Hq=%lld Hkv=%lld %s", lens.c_str(), (long long)a.heads_q, (long long)a.heads_kv,
             head_dims(a.head_dim, a.dv()).c_str());
}

}  // namespace bb::harness
