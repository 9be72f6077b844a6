// Levenshtein distance, used to suggest the nearest valid key when a user
// misspells a config or command-line key.
#pragma once

#include <cstddef>
#include <string>

namespace bb {

// Insertions, deletions and substitutions needed to turn a into b.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace bb
