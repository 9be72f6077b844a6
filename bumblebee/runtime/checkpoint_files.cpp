// Checkpoint manifest (size and CRC-32C per file), verification on load, and swap recovery.
#include "bumblebee/runtime/checkpoint_files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/core/crc32c.h"
#include "bumblebee/core/error.h"

namespace bb {

namespace fs = std::filesystem;

namespace {

using FileSum = FileChecksum;

// The manifest's file list, or the reason there is none usable.
struct Manifest {
  std::map<std::string, FileSum> files;
  std::string problem;
};

Manifest read_manifest(const std::string& dir) {
  Manifest m;
  const std::string path = dir + "/" + kCheckpointManifest;
  if (!fs::is_regular_file(path)) {
    m.problem = std::string(kCheckpointManifest) + " is missing (a save writes it last" +
                (fs::exists(dir + "/trainer_state.json") ? "; checkpoints of format version 2 and older have none)"
                                                          : ")");
    return m;
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
    for (const auto& [name, e] : j.at("files").items())
      m.files[name] = {e.at("bytes").get<uint64_t>(), e.at("crc32c").get<uint32_t>()};
  } catch (const nlohmann::json::exception& e) {
    m.problem = std::string(kCheckpointManifest) + " is not a valid manifest: " + e.what();
  }
  return m;
}

std::string incompleteness(const std::string& dir, const Manifest& m) {
  if (!m.problem.empty()) return m.problem;
  if (!m.files.contains("trainer_state.json")) return "the manifest does not list trainer_state.json";
  for (const auto& [name, sum] : m.files) {
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) return name + " is missing";
    const uint64_t bytes = fs::file_size(p, ec);
    if (ec || bytes != sum.bytes)
      return name + " is " + std::to_string(bytes) + " bytes, the manifest records " + std::to_string(sum.bytes);
  }
  return "";
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace

void write_checkpoint_manifest(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const std::string name = fs::relative(e.path(), dir).generic_string();
    if (name == kCheckpointManifest) continue;
    const FileSum s = checksum_file(e.path().string());
    files[name] = {{"bytes", s.bytes}, {"crc32c", s.crc32c}};
  }
  // Written under another name and renamed, so a manifest that is there is whole.
  const std::string path = dir + "/" + kCheckpointManifest, partial = path + ".partial";
  {
    std::ofstream f(partial);
    f << nlohmann::json{{"files", files}}.dump(2) << "\n";
    BB_CHECK(f.good(), "cannot write ", partial);
  }
  fs::rename(partial, path);
}

std::string checkpoint_incompleteness(const std::string& dir) { return incompleteness(dir, read_manifest(dir)); }

void verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& files) {
  const Manifest m = read_manifest(dir);
  const std::string problem = incompleteness(dir, m);
  BB_CHECK(problem.empty(), "checkpoint ", dir, " is incomplete: ", problem);
  for (const std::string& name : files) {
    const auto it = m.files.find(name);
    BB_CHECK(it != m.files.end(), "checkpoint ", dir, ": its manifest does not list ", name);
    const std::string path = dir + "/" + name;
    const FileSum s = checksum_file(path);
    BB_CHECK(s.bytes == it->second.bytes, "checkpoint file ", path, " is ", s.bytes, " bytes, the manifest records ",
             it->second.bytes);
    BB_CHECK(s.crc32c == it->second.crc32c, "checkpoint file ", path, " is corrupt: its CRC-32C is ", crc32c_hex(s.crc32c),
             ", the manifest records ", crc32c_hex(it->second.crc32c), " (the file changed after it was saved)");
  }
}

std::vector<std::string> checkpoint_files_under(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& [name, sum] : read_manifest(dir).files)
    if (name.starts_with(prefix)) names.push_back(name);
  return names;
}

bool checkpoint_exists(const std::string& dir) {
  return exists(dir) || exists(dir + ".tmp") || exists(dir + ".old");
}

CheckpointRecovery plan_checkpoint_recovery(const std::string& dir) {
  using Source = CheckpointRecovery::Source;
  const std::string tmp = dir + ".tmp", old = dir + ".old";
  if (!checkpoint_exists(dir)) return {};
  // Newest first: a save writes DIR.tmp while DIR holds the previous checkpoint
  // and DIR.old exists only while DIR.tmp is being swapped in.
  const std::vector<std::pair<Source, std::string>> candidates = {{Source::Tmp, tmp}, {Source::Dir, dir},
                                                                  {Source::Old, old}};
  std::string problems;
  for (const auto& [source, path] : candidates) {
    if (!exists(path)) continue;
    const std::string problem = checkpoint_incompleteness(path);
    if (problem.empty()) {
      CheckpointRecovery r{source, ""};
      if (source == Source::Dir && exists(old))
        r.note = "removed " + old + ", left behind by a swap that had finished";
      else if (source == Source::Tmp)
        r.note = tmp + " is a complete save that was not swapped in; it becomes " + dir;
      else if (source == Source::Old)
        r.note = dir + (exists(dir) ? " is incomplete (" + checkpoint_incompleteness(dir) + "), moved to " + dir +
                                          ".incomplete;"
                                    : " is missing;") +
                 " restored the previous checkpoint " + old + " as " + dir;
      return r;
    }
    problems += (problems.empty() ? "" : "; ") + path + ": " + problem;
  }
  BB_FAIL("no complete training checkpoint at ", dir, " to resume from: ", problems, ". To start over, remove ", dir,
          ", ", tmp, " and ", old);
}

void apply_checkpoint_recovery(const std::string& dir, const CheckpointRecovery& r) {
  using Source = CheckpointRecovery::Source;
  const std::string tmp = dir + ".tmp", old = dir + ".old", incomplete = dir + ".incomplete";
  if (r.source == Source::Tmp) {
    if (exists(dir)) {
      fs::remove_all(old);
      fs::rename(dir, old);
    }
    fs::rename(tmp, dir);
    fs::remove_all(old);
  } else if (r.source == Source::Old) {
    if (exists(dir)) {
      fs::remove_all(incomplete);
      fs::rename(dir, incomplete);
    }
    fs::rename(old, dir);
  } else if (r.source == Source::Dir) {
    fs::remove_all(old);
  }
}

}  // namespace bb
