// Where a tensor lives: the host, or one CUDA device.
#pragma once

#include <string>

namespace bb {

struct Device {
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::CUDA, i}; }
  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;               // "cpu" or "cuda:N"
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:N"
};

}  // namespace bb
