// KeyValueArgs: the key=value command lines of our tools
// (`bb-bench backend=bb hf_path=DIR backend.parallel.tp=4 bench.steps=10`).
//
// Each tool lists the keys it understands; anything else is a bb::Error that
// names the key and the nearest known one, so a typo never silently falls
// back to a default. Arguments without '=' are kept as positional.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bumblebee/core/edit_distance.h"

namespace bb {

class KeyValueArgs {
 public:
  // Parses argv[first..argc). The value is everything after the first '=' and may be
  // empty or contain '='. Errors: an empty key, a key not in `known_keys`, a key given twice.
  static KeyValueArgs parse(int argc, char** argv, const std::vector<std::string>& known_keys, size_t first = 1);

  // Asking for a key the tool did not declare is a bug in the tool and throws.
  bool has(const std::string& key) const;
  std::string get(const std::string& key, const std::string& default_value) const;
  int64_t get_int(const std::string& key, int64_t default_value) const;
  double get_double(const std::string& key, double default_value) const;
  bool get_bool(const std::string& key, bool default_value) const;  // true/false/1/0
  const std::vector<std::string>& positional() const { return positional_; }
  const std::map<std::string, std::string>& values() const { return values_; }  // the given key=value pairs

 private:
  const std::string* find(const std::string& key) const;

  std::set<std::string> known_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace bb
