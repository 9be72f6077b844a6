// The key=value words of our tools' command lines
// (`bb-bench backend=bb hf_path=DIR backend.parallel.tp=4 bench.steps=10`),
// split and checked against the keys a tool knows. ConfigSchema types and
// applies them; this file only finds the keys.
//
// A word without '=', an empty key, an unknown key and a key given twice are
// bb::Errors; an unknown key's error names the nearest known one, so a typo
// never silently falls back to a default.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace bb {

struct KeyValue {
  std::string key;
  std::string value;   // everything after the first '=': may be empty or contain '='
};

// The words in command-line order. `tool` names the program in the hint of a
// word that is not key=value ("TOOL help lists the keys").
std::vector<KeyValue> parse_key_values(const std::vector<std::string>& words, const std::set<std::string>& known_keys,
                                       const std::string& tool);

// The known key the user most likely meant: one whose last dotted parts equal
// `key` ("tp" -> "backend.parallel.tp"), else the nearest by edit distance when
// it is close enough to be a typo. Empty when nothing fits.
std::string suggest_key(const std::string& key, const std::set<std::string>& known_keys);

}  // namespace bb
