// Splitting key=value words and naming the nearest key of a typo.
#include "bumblebee/runtime/cli_args.h"

#include <algorithm>
#include <limits>

#include "bumblebee/core/edit_distance.h"
#include "bumblebee/core/error.h"

namespace bb {

namespace {

std::string join(const std::set<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

}  // namespace

std::string suggest_key(const std::string& key, const std::set<std::string>& known) {
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

std::vector<KeyValue> parse_key_values(const std::vector<std::string>& words, const std::set<std::string>& known,
                                       const std::string& tool) {
  std::vector<KeyValue> out;
  for (const std::string& word : words) {
    const size_t eq = word.find('=');
    BB_CHECK(eq != std::string::npos, "argument '", word, "' is not key=value (", tool, " help lists the keys)");
    const std::string key = word.substr(0, eq);
    BB_CHECK(!key.empty(), "argument '", word, "' has no key before '='");
    if (!known.count(key)) {
      const std::string guess = suggest_key(key, known);
      if (!guess.empty()) BB_FAIL("unknown key '", key, "'; did you mean '", guess, "'?");
      BB_FAIL("unknown key '", key, "'; known keys: ", join(known));
    }
    for (const KeyValue& kv : out)
      BB_CHECK(kv.key != key, "key '", key, "' given twice ('", key, "=", kv.value, "' and '", word, "')");
    out.push_back({key, word.substr(eq + 1)});
  }
  return out;
}

}  // namespace bb
