// JsonlLogger: one JSON object per line (metrics.jsonl), flushed after each so a crash loses nothing written.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace bb::train {

class JsonlLogger {
 public:
  enum class Mode { Truncate, Append };
  // Creates `path`, truncating it or (a resumed run) appending to it.
  JsonlLogger(const std::string& path, Mode mode);
  ~JsonlLogger();
  JsonlLogger(const JsonlLogger&) = delete;
  JsonlLogger& operator=(const JsonlLogger&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace bb::train
