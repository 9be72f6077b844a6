// JsonlLogger: one JSON object per line (metrics.jsonl), flushed after each so a crash loses nothing written.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace bb::train {

class JsonlLogger {
 public:
  // Creates (or truncates) `path`.
  explicit JsonlLogger(const std::string& path);
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
