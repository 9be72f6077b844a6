// The files of a training checkpoint: the manifest that proves a save
// complete and lets a load verify every file, and the recovery of a save that
// was interrupted between its renames.
//
// A save writes everything into DIR.tmp, then DIR.tmp/manifest.json last: the
// size and CRC-32C of every other file. It then renames DIR -> DIR.old and
// DIR.tmp -> DIR and removes DIR.old. A kill at any point leaves a state from
// which the newest complete checkpoint is found again: DIR.tmp is newer than
// DIR, which is newer than DIR.old.
#pragma once

#include <string>
#include <vector>

namespace bb {

inline constexpr const char* kCheckpointManifest = "manifest.json";

// Writes `dir`/manifest.json listing every other file under `dir` (paths relative to it).
void write_checkpoint_manifest(const std::string& dir);

// Empty when `dir` holds a complete checkpoint (its manifest is there and every
// file it lists is there with the recorded size); otherwise what is missing or
// wrong, e.g. "trainer_state.json is missing".
std::string checkpoint_incompleteness(const std::string& dir);

// Checks the size and CRC-32C of each of `files` (relative to `dir`) against
// the manifest; an error names the first file that differs.
void verify_checkpoint_files(const std::string& dir, const std::vector<std::string>& files);

// The files the manifest lists whose relative path starts with `prefix` (e.g. "model/").
std::vector<std::string> checkpoint_files_under(const std::string& dir, const std::string& prefix);

// Whether a save has left anything at `dir`, `dir`.tmp or `dir`.old.
bool checkpoint_exists(const std::string& dir);

// Which directory holds the newest complete checkpoint, and what to do to put it at `dir`.
struct CheckpointRecovery {
  enum class Source { None, Dir, Tmp, Old };
  Source source = Source::None;   // None: nothing was ever saved at `dir`
  std::string note;               // for the log when a swap is recovered; empty when nothing is to be done
};

// Looks (without changing anything) at `dir`, `dir`.tmp and `dir`.old and picks
// the newest complete one. An error when something exists but none is complete,
// naming what each one lacks.
CheckpointRecovery plan_checkpoint_recovery(const std::string& dir);

// Renames so that the checkpoint `r` chose is at `dir`: a complete DIR.tmp is
// swapped in as a save would have; DIR.old is restored as DIR, an incomplete
// DIR moved aside to DIR.incomplete (nothing is deleted that could be the only
// copy of something); beside a complete DIR, a leftover DIR.old is removed as
// the save would have. Run by one process.
void apply_checkpoint_recovery(const std::string& dir, const CheckpointRecovery& r);

}  // namespace bb
