// Parsing and typed access for key=value command lines.
#include "bumblebee/runtime/cli_args.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "bumblebee/core/error.h"

namespace bb {

namespace {

// The known key the user most likely meant: one whose last dotted parts equal the
// given key ("tp" -> "backend.parallel.tp"), else the nearest by edit distance
// when it is close enough to be a typo. Empty when nothing fits.
std::string suggest(const std::string& key, const std::set<std::string>& known) {
  for (const std::string& k : known)
    if (k.size() > key.size() && k.ends_with(key) && k[k.size() - key.size() - 1] == '.') return k;
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_distance) {
      best_distance = d;
      best = k;
    }
  }
  return best_distance <= std::max<size_t>(2, key.size() / 3) ? best : std::string();
}

std::string join(const std::set<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

KeyValueArgs KeyValueArgs::parse(int argc, char** argv, const std::vector<std::string>& known_keys, size_t first) {
  KeyValueArgs args;
  args.known_.insert(known_keys.begin(), known_keys.end());
  for (size_t i = first; i < size_t(std::max(argc, 0)); ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      args.positional_.push_back(arg);
      continue;
    }
    const std::string key = arg.substr(0, eq);
    BB_CHECK(!key.empty(), "argument '", arg, "' has no key before '='");
    if (!args.known_.count(key)) {
      const std::string guess = suggest(key, args.known_);
      if (!guess.empty()) BB_FAIL("unknown key '", key, "'; did you mean '", guess, "'?");
      BB_FAIL("unknown key '", key, "'; known keys: ", join(args.known_));
    }
    auto [it, inserted] = args.values_.emplace(key, arg.substr(eq + 1));
    BB_CHECK(inserted, "key '", key, "' given twice ('", key, "=", it->second, "' and '", arg, "')");
  }
  return args;
}

const std::string* KeyValueArgs::find(const std::string& key) const {
  BB_CHECK(known_.count(key), "KeyValueArgs: the tool reads key '", key, "' but did not declare it");
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

bool KeyValueArgs::has(const std::string& key) const { return find(key) != nullptr; }

std::string KeyValueArgs::get(const std::string& key, const std::string& default_value) const {
  const std::string* v = find(key);
  return v ? *v : default_value;
}

int64_t KeyValueArgs::get_int(const std::string& key, int64_t default_value) const {
  const std::string* v = find(key);
  if (!v) return default_value;
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  BB_CHECK(ec != std::errc::result_out_of_range, "key '", key, "': '", *v, "' does not fit in a 64-bit integer");
  BB_CHECK(ec == std::errc() && end == v->data() + v->size(), "key '", key, "': '", *v, "' is not an integer");
  return out;
}

double KeyValueArgs::get_double(const std::string& key, double default_value) const {
  const std::string* v = find(key);
  if (!v) return default_value;
  double out = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  BB_CHECK(ec != std::errc::result_out_of_range, "key '", key, "': '", *v, "' is out of the range of a double");
  BB_CHECK(ec == std::errc() && end == v->data() + v->size(), "key '", key, "': '", *v, "' is not a number");
  return out;
}

bool KeyValueArgs::get_bool(const std::string& key, bool default_value) const {
  const std::string* v = find(key);
  if (!v) return default_value;
  if (*v == "true" || *v == "1") return true;
  if (*v == "false" || *v == "0") return false;
  BB_FAIL("key '", key, "': '", *v, "' is not a boolean (expected true, false, 1 or 0)");
}

}  // namespace bb
