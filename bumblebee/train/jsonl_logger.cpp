// JsonlLogger: line-buffered JSON records.
#include "bumblebee/train/jsonl_logger.h"

#include <cerrno>
#include <cstring>

#include "bumblebee/core/error.h"

namespace bb::train {

JsonlLogger::JsonlLogger(const std::string& path, Mode mode)
    : path_(path), file_(std::fopen(path.c_str(), mode == Mode::Append ? "a" : "w")) {
  BB_CHECK(file_, "cannot open ", path, ": ", std::strerror(errno));
}

JsonlLogger::~JsonlLogger() {
  if (file_) std::fclose(file_);
}

void JsonlLogger::write(const nlohmann::json& record) {
  // A diverged (non-finite) loss is written as null, keeping every line valid JSON.
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  BB_CHECK(ok, "cannot write ", path_, ": ", std::strerror(errno));
}

}  // namespace bb::train
