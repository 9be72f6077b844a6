// Reading back metrics.jsonl and cutting it at the resumed step.
#include "bumblebee/train/metrics_history.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "bumblebee/core/error.h"

namespace bb::train {

std::vector<nlohmann::json> keep_metrics_through(const std::string& path, int64_t last_step) {
  std::vector<nlohmann::json> kept;
  if (!std::filesystem::exists(path)) return kept;
  std::string text;
  {
    std::ifstream f(path, std::ios::binary);
    BB_CHECK(f, "cannot read ", path);
    std::ostringstream s;
    s << f.rdbuf();
    text = s.str();
  }
  std::string out;
  size_t at = 0;
  for (int64_t line_no = 1; at < text.size(); ++line_no) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;   // cut short by a kill: never a whole record
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      BB_FAIL(path, " line ", line_no, " is not JSON (", e.what(), "); cannot resume its log");
    }
    BB_CHECK(record.is_object() && record.contains("step") && record["step"].is_number_integer(), path, " line ",
             line_no, " has no integer \"step\"; cannot resume its log");
    if (record["step"].get<int64_t>() > last_step) continue;
    out += line + "\n";
    kept.push_back(std::move(record));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << out;
    BB_CHECK(f.good(), "cannot write ", tmp);
  }
  std::filesystem::rename(tmp, path);
  return kept;
}

}  // namespace bb::train
