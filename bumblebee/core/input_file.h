// Opening the files users hand us (tokens, recipes, JSONL corpora, tokenizers,
// configs, checkpoint shards, datasets). A path that is missing, a directory,
// not a regular file or unreadable is a bb::Error that names the path and what
// it was given as ("tokens file /tmp/x is a directory, not a file"), instead
// of a stream error from inside a parser ("basic_filebuf::underflow").
#pragma once

#include <fstream>
#include <string>

namespace bb {

// Throws unless `path` names an existing, readable regular file; `what` says
// what the file is for ("tokens file", "recipe", "tokenizer file").
void check_input_file(const std::string& path, const std::string& what);

// check_input_file, then the file opened for reading.
std::ifstream open_input_file(const std::string& path, const std::string& what,
                              std::ios::openmode mode = std::ios::in);

// The whole file as bytes, with the same checks and a read error naming the path.
std::string read_input_file(const std::string& path, const std::string& what);

}  // namespace bb
