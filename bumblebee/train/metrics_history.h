// The metrics of earlier parts of a resumed run: OUT/metrics.jsonl cut back to
// the step of the checkpoint the run resumes from, so a run resumed any number
// of times logs each step exactly once and its plot and summary cover it all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bb::train {

// The records of `path` (one JSON object per line) whose "step" is at most
// `last_step`, in order; the file is rewritten (atomically) to hold exactly
// those. A missing file is no history. A last line without its newline (a
// write cut short by a kill) is dropped; any other line that is not a JSON
// object with a "step" is an error naming the file and line.
std::vector<nlohmann::json> keep_metrics_through(const std::string& path, int64_t last_step);

}  // namespace bb::train
