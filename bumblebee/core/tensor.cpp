// Tensor storage, views, copies and casts.
#include "bumblebee/core/tensor.h"

#include <cstring>
#include <sstream>

#include "bumblebee/core/device_memory.h"
#include "bumblebee/core/half.h"

#ifdef BB_WITH_CUDA
#include "bumblebee/core/cuda/cuda_memory.h"
#endif

namespace bb {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    BB_CHECK(!__builtin_mul_overflow(n, d, &n), "shape ", shape_str(s), " has more elements than int64 can count");
  return n;
}

namespace {
// Bytes of a new tensor, refusing shapes no machine could hold (their byte
// count would wrap or pass kMaxTensorBytes) before any allocation or loop.
size_t checked_nbytes(const Shape& shape, DType dtype) {
  constexpr int64_t kMaxTensorBytes = int64_t(1) << 50;   // 1 PiB
  for (int64_t d : shape) BB_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  int64_t bytes = 0;
  BB_CHECK(!__builtin_mul_overflow(shape_numel(shape), int64_t(dtype_size(dtype)), &bytes) && bytes <= kMaxTensorBytes,
           "a ", dtype_name(dtype), " tensor of shape ", shape_str(shape), " would take more than ", kMaxTensorBytes,
           " bytes");
  return size_t(bytes);
}
}  // namespace

Storage::Storage(size_t nbytes, Device dev) : data_(device_alloc(nbytes, dev)), nbytes_(nbytes), device_(dev) {}

Storage::Storage(void* data, size_t nbytes, Device dev, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), device_(dev), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owner_) return;
  if (pinned_)
    host_pinned_free(data_, nbytes_);
  else
    device_free(data_, nbytes_, device_);
}

void Storage::relocate(Device dev, bool pinned_host) {
  BB_CHECK(!pinned_host || dev.is_cpu(), "Storage::relocate: pinned memory is host memory, not ", dev.str());
  if (dev == device_ && pinned_host == pinned_) return;
  void* moved = pinned_host ? host_pinned_alloc(nbytes_) : device_alloc(nbytes_, dev);
  device_copy(moved, dev, data_, device_, nbytes_);
  if (!owner_) {
    if (pinned_)
      host_pinned_free(data_, nbytes_);
    else
      device_free(data_, nbytes_, device_);
  }
  owner_.reset();
  data_ = moved;
  device_ = dev;
  pinned_ = pinned_host;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device dev) {
  const size_t nbytes = checked_nbytes(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(nbytes, dev);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device dev) {
  Tensor t = empty(shape, dtype, dev);
  t.zero_();
  return t;
}

Tensor Tensor::wrap(void* data, const Shape& shape, DType dtype, Device dev, std::shared_ptr<void> owner) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(data, checked_nbytes(shape, dtype), dev, std::move(owner));
  return t;
}

namespace {

double load_as_double(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

void store_from_double(void* p, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F32: static_cast<float*>(p)[i] = float(v); break;
    case DType::BF16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); break;
    case DType::F16: static_cast<uint16_t*>(p)[i] = float_to_f16(float(v)); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
  }
}

// Host cast; int64 goes through int64 directly so large ids are exact.
void host_cast(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  if (sdt == DType::I64 && ddt == DType::I32) {
    for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(dst)[i] = int32_t(static_cast<const int64_t*>(src)[i]);
    return;
  }
  if (sdt == DType::I32 && ddt == DType::I64) {
    for (int64_t i = 0; i < n; ++i) static_cast<int64_t*>(dst)[i] = static_cast<const int32_t*>(src)[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_double(dst, ddt, i, load_as_double(src, sdt, i));
}

}  // namespace

Tensor Tensor::from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype) {
  BB_CHECK(int64_t(values.size()) == shape_numel(shape), "from_doubles: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype);
  host_cast(values.data(), DType::F64, t.raw(), dtype, t.numel());
  return t;
}

int64_t Tensor::size(int64_t d) const {
  if (d < 0) d += dim();
  BB_CHECK(d >= 0 && d < dim(), "dimension ", d, " out of range for shape ", shape_str(shape_));
  return shape_[size_t(d)];
}

Tensor Tensor::view(const Shape& shape) const {
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      BB_CHECK(infer < 0, "view: more than one -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    BB_CHECK(known > 0 && numel() % known == 0, "view: cannot infer -1 in ", shape_str(shape), " from ", numel(), " elements");
    s[size_t(infer)] = numel() / known;
  }
  BB_CHECK(shape_numel(s) == numel(), "view: shape ", shape_str(shape), " does not match ", shape_str(shape_));
  Tensor t = *this;
  t.shape_ = s;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  BB_CHECK(dim() >= 1, "narrow on a scalar tensor");
  BB_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0], "narrow [", start, ", ", start + length,
           ") out of range for dim 0 of ", shape_str(shape_));
  Tensor t = *this;
  int64_t row = numel() / std::max<int64_t>(shape_[0], 1);
  t.offset_ += size_t(start * row) * dtype_size(dtype_);
  t.shape_[0] = length;
  return t;
}

Tensor Tensor::flat_slice(int64_t start, const Shape& shape) const {
  BB_CHECK(start >= 0 && start + shape_numel(shape) <= numel(), "flat_slice [", start, ", ",
           start + shape_numel(shape), ") out of range for ", numel(), " elements");
  Tensor t = *this;
  t.offset_ += size_t(start) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device dev) const {
  if (dev == device()) return *this;
  Tensor t = empty(shape_, dtype_, dev);
  device_copy(t.raw(), dev, raw(), device(), nbytes());
  return t;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype_) return *this;
  Tensor t = empty(shape_, dt, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  BB_CHECK(src.numel() == numel(), "copy_from: ", shape_str(src.shape_), " into ", shape_str(shape_));
  if (src.dtype_ == dtype_) {
    device_copy(raw(), device(), src.raw(), src.device(), nbytes());
    return;
  }
  if (device().is_cpu() && src.device().is_cpu()) {
    host_cast(src.raw(), src.dtype_, raw(), dtype_, numel());
    return;
  }
#ifdef BB_WITH_CUDA
  if (device() == src.device()) {
    cuda::cast(src.raw(), src.dtype_, raw(), dtype_, numel(), device().index);
    return;
  }
#endif
  // Across devices with a dtype change: move first, then cast where the destination lives.
  Tensor moved = src.to(device());
  copy_from(moved);
}

void Tensor::zero_() { device_memset_zero(raw(), nbytes(), device()); }

void Tensor::fill_(double v) {
  Tensor host = empty(shape_, dtype_);
  for (int64_t i = 0; i < numel(); ++i) store_from_double(host.raw(), dtype_, i, v);
  copy_from(host);
}

std::vector<double> Tensor::to_doubles() const {
  Tensor h = to(Device::cpu());
  std::vector<double> out(static_cast<size_t>(numel()));
  host_cast(h.raw(), dtype_, out.data(), DType::F64, numel());
  return out;
}

double Tensor::item() const {
  BB_CHECK(numel() == 1, "item() on a tensor of shape ", shape_str(shape_));
  return to_doubles()[0];
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  BB_CHECK(t.defined(), what, ": tensor is undefined");
  BB_CHECK(t.shape() == expected, what, ": expected shape ", shape_str(expected), ", got ", shape_str(t.shape()));
}

void check_dtype(const Tensor& t, DType expected, const char* what) {
  BB_CHECK(t.dtype() == expected, what, ": expected ", dtype_name(expected), ", got ", dtype_name(t.dtype()));
}

void check_same_device(const Tensor& a, const Tensor& b, const char* what) {
  BB_CHECK(a.device() == b.device(), what, ": tensors on ", a.device().str(), " and ", b.device().str());
}

}  // namespace bb
