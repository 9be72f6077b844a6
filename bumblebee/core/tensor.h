// Tensor: a typed, shaped, contiguous view into reference-counted device storage.
//
// Tensors are always row-major contiguous. Views (reshape, narrow along the
// first dimension, flat sub-ranges) share storage with their parent; this is
// all the model code needs, because parameters live as views into one flat
// buffer and packed (THD) activations are sliced by token rows.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "bumblebee/core/device.h"
#include "bumblebee/core/dtype.h"
#include "bumblebee/core/error.h"

namespace bb {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);   // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);   // fails naming the shape when the product overflows int64

// A block of bytes on one device; frees itself when the last Tensor lets go.
class Storage {
 public:
  Storage(size_t nbytes, Device dev);
  // Wraps memory owned elsewhere (an mmap'd file); `owner` keeps it alive.
  Storage(void* data, size_t nbytes, Device dev, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned_host() const { return pinned_; }

  // Moves the bytes to `dev` (into page-locked host memory when `pinned_host`)
  // and frees the old block, keeping this Storage: every tensor viewing it
  // follows, which is what offloading a model's state needs. A no-op when the
  // bytes already live there.
  void relocate(Device dev, bool pinned_host);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool pinned_ = false;
  std::shared_ptr<void> owner_;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device dev = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device dev = Device::cpu());
  // Host tensor from values converted to `dtype` (any floating or integer dtype).
  static Tensor from_doubles(const std::vector<double>& values, const Shape& shape, DType dtype);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    BB_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: ", values.size(),
             " values do not fill shape ", shape_str(shape));
    Tensor t = empty(shape, dtype_of<T>::value);
    std::copy(values.begin(), values.end(), t.data<T>());
    return t;
  }
  // View over external memory kept alive by `owner`.
  static Tensor wrap(void* data, const Shape& shape, DType dtype, Device dev, std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;   // negative d counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool shares_storage(const Tensor& o) const { return storage_ && storage_ == o.storage_; }
  Storage* storage() const { return storage_.get(); }   // null when undefined

  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  template <typename T>
  T* data() const {
    BB_CHECK(dtype_ == dtype_of<T>::value, "tensor holds ", dtype_name(dtype_), ", accessed as ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw());
  }

  // Views sharing storage.
  Tensor view(const Shape& shape) const;              // same numel; one dim may be -1
  Tensor narrow(int64_t start, int64_t length) const;  // rows [start, start+length) of dim 0
  Tensor flat_slice(int64_t start, const Shape& shape) const;  // elements from `start`, as `shape`

  // Copies.
  Tensor clone() const;
  Tensor to(Device dev) const;   // returns *this when already there
  Tensor to(DType dt) const;     // cast copy (host or device); returns *this when equal
  void copy_from(const Tensor& src);  // same numel; converts dtype and moves across devices
  void zero_();
  void fill_(double v);               // host or device
  std::vector<double> to_doubles() const;  // any dtype, any device (copies to host)
  double item() const;                     // single-element tensor as double

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
};

// Checks used by ops: message names the op and the offending tensor.
void check_shape(const Tensor& t, const Shape& expected, const char* what);
void check_dtype(const Tensor& t, DType expected, const char* what);
void check_same_device(const Tensor& a, const Tensor& b, const char* what);

}  // namespace bb
