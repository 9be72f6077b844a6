// Training checkpoints verified on load (Runtime::load_checkpoint with
// checkpoint_files.h): each kind of damage to each kind of file is an error
// naming the file, and every state an interrupted save can leave behind
// (DIR.tmp, DIR, DIR.old) resumes from the newest complete checkpoint or is an
// error naming what is missing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "bumblebee/runtime/checkpoint_files.h"
#include "bumblebee/runtime/runtime.h"
#include "tests/model/hf_fixture.h"

namespace bb {
namespace {

namespace fs = std::filesystem;

// One model and two of its checkpoints, after 1 and after 2 optimizer steps.
class CheckpointIntegrity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("bb_ckpt_integrity_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    RuntimeConfig cfg;
    cfg.hf_path = test::fixture_dir("llama3_gqa");
    cfg.backend_cfg.dtype = "float64";
    cfg.backend_cfg.optimizer.lr = 1e-2;
    rt_ = create_runtime(cfg).release();
    h_ = new ModelHandle(rt_->build_model());
    const PackedBatch batch = test::fixture_batch("llama3_gqa");
    auto train = rt_->train_mode(*h_);
    for (int step = 1; step <= 2; ++step) {
      rt_->zero_grad(*h_);
      rt_->forward_backward(*h_, batch);
      rt_->optimizer_step(*h_);
      rt_->save_checkpoint(*h_, (base_ / ("after_" + std::to_string(step))).string());
    }
  }
  static void TearDownTestSuite() {
    delete h_;
    delete rt_;
    fs::remove_all(base_);
  }
  void SetUp() override {
    dir_ = base_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  // A fresh copy of the checkpoint after `step` steps at `to`.
  static void copy_checkpoint(int step, const fs::path& to) {
    fs::copy(base_ / ("after_" + std::to_string(step)), to, fs::copy_options::recursive);
  }
  // The error load_checkpoint reports for `ck`, or "" when it loads.
  std::string load_error(const fs::path& ck) {
    try {
      loaded_steps_ = rt_->load_checkpoint(*h_, ck.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  static inline fs::path base_;
  static inline Runtime* rt_ = nullptr;
  static inline ModelHandle* h_ = nullptr;
  fs::path dir_;
  int64_t loaded_steps_ = -1;
};

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// Where a safetensors file's tensor data begins: after its u64 header length and header.
size_t safetensors_data_start(const std::string& s) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | uint8_t(s[size_t(i)]);
  return 8 + size_t(n);
}

struct Damage {
  const char* name;
  std::function<void(const fs::path&)> apply;
};

const std::vector<Damage>& damages() {
  static const std::vector<Damage> d = {
      {"one flipped byte", [](const fs::path& p) {
         std::string s = read_bytes(p);
         s[s.size() / 2] = char(s[s.size() / 2] ^ 0xFF);
         write_bytes(p, s);
       }},
      {"data zeroed", [](const fs::path& p) {
         std::string s = read_bytes(p);
         const size_t from = p.extension() == ".safetensors" ? safetensors_data_start(s) : s.size() / 2;
         std::fill(s.begin() + std::ptrdiff_t(from), s.end(), '\0');
         write_bytes(p, s);
       }},
      {"truncated", [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); }},
      {"deleted", [](const fs::path& p) { fs::remove(p); }},
  };
  return d;
}

struct FileKind {
  std::string path;        // relative to the checkpoint
  // The words the error must hold, per damage (in damages() order) beyond the file's name.
  std::vector<std::string> words;
};

TEST_F(CheckpointIntegrity, EveryDamagedFileIsAnErrorNamingIt) {
  const std::vector<FileKind> kinds = {
      {"trainer_state.json", {"corrupt", "corrupt", "bytes, the manifest records", "is missing"}},
      {"manifest.json", {"not a valid manifest", "not a valid manifest", "not a valid manifest", "is missing"}},
      {"model/config.json", {"corrupt", "corrupt", "bytes, the manifest records", "is missing"}},
      {"state/metadata.json", {"corrupt", "corrupt", "bytes, the manifest records", "is missing"}},
      // Checked against metadata.json's checksum when the load first reads it.
      {"state/rank-00000.safetensors", {"corrupt", "corrupt", "bytes, the manifest records", "is missing"}},
  };
  for (const FileKind& kind : kinds) {
    for (size_t d = 0; d < damages().size(); ++d) {
      const fs::path ck = dir_ / "checkpoint";
      fs::remove_all(ck);
      copy_checkpoint(1, ck);
      damages()[d].apply(ck / kind.path);
      const std::string e = load_error(ck);
      SCOPED_TRACE(kind.path + ", " + damages()[d].name + ": " + e);
      EXPECT_NE(e.find(kind.path), std::string::npos);
      EXPECT_NE(e.find(kind.words[d]), std::string::npos);
    }
  }
}

TEST_F(CheckpointIntegrity, AnUndamagedCheckpointLoadsItsSteps) {
  copy_checkpoint(2, dir_ / "checkpoint");
  EXPECT_EQ(load_error(dir_ / "checkpoint"), "");
  EXPECT_EQ(loaded_steps_, 2);
}

// What an interrupted save leaves, and what the next load makes of it.
struct SwapState {
  const char* name;
  std::function<void(const fs::path& dir)> make;   // dir: the checkpoint path (DIR)
  int64_t steps;                                    // -1: an error
  std::vector<std::string> words;                   // in the error, or what exists afterwards
};

fs::path with_suffix(const fs::path& dir, const char* suffix) { return fs::path(dir.string() + suffix); }

TEST_F(CheckpointIntegrity, InterruptedSwapsResumeTheNewestCompleteCheckpoint) {
  auto partial = [](const fs::path& p) { fs::remove(p / kCheckpointManifest); };
  const std::vector<SwapState> rows = {
      {"only DIR.old (killed between the renames of a first swap)",
       [](const fs::path& d) { copy_checkpoint(1, with_suffix(d, ".old")); }, 1, {""}},
      {"DIR.tmp complete beside DIR (killed before the renames)",
       [](const fs::path& d) {
         copy_checkpoint(1, d);
         copy_checkpoint(2, with_suffix(d, ".tmp"));
       },
       2, {""}},
      {"DIR.tmp and DIR.old complete, no DIR (killed between the renames)",
       [](const fs::path& d) {
         copy_checkpoint(1, with_suffix(d, ".old"));
         copy_checkpoint(2, with_suffix(d, ".tmp"));
       },
       2, {""}},
      {"DIR.tmp partial beside DIR (killed while writing)",
       [&](const fs::path& d) {
         copy_checkpoint(1, d);
         copy_checkpoint(2, with_suffix(d, ".tmp"));
         partial(with_suffix(d, ".tmp"));
       },
       1, {".tmp"}},
      {"DIR complete beside DIR.old (killed before removing DIR.old)",
       [](const fs::path& d) {
         copy_checkpoint(1, with_suffix(d, ".old"));
         copy_checkpoint(2, d);
       },
       2, {""}},
      {"DIR without its trainer state beside a complete DIR.old",
       [](const fs::path& d) {
         copy_checkpoint(1, with_suffix(d, ".old"));
         copy_checkpoint(2, d);
         fs::remove(d / "trainer_state.json");
       },
       1, {".incomplete"}},
      {"only a partial DIR.tmp (killed while writing the first save)",
       [&](const fs::path& d) {
         copy_checkpoint(1, with_suffix(d, ".tmp"));
         partial(with_suffix(d, ".tmp"));
       },
       -1, {"no complete training checkpoint", "checkpoint.tmp: manifest.json is missing"}},
      {"DIR without its trainer state, nothing to recover from",
       [](const fs::path& d) {
         copy_checkpoint(1, d);
         fs::remove(d / "trainer_state.json");
       },
       -1, {"no complete training checkpoint", "checkpoint: trainer_state.json is missing"}},
      {"nothing saved", [](const fs::path&) {}, -1, {"no training checkpoint at"}},
  };
  for (const SwapState& row : rows) {
    const fs::path d = dir_ / "checkpoint";
    for (const char* s : {"", ".tmp", ".old", ".incomplete"}) fs::remove_all(with_suffix(d, s));
    row.make(d);
    loaded_steps_ = -1;
    const std::string e = load_error(d);
    SCOPED_TRACE(std::string(row.name) + ": " + e);
    if (row.steps < 0) {
      for (const std::string& w : row.words) EXPECT_NE(e.find(w), std::string::npos) << w;
      continue;
    }
    EXPECT_EQ(e, "");
    EXPECT_EQ(loaded_steps_, row.steps);
    // The checkpoint used is now at DIR, complete, and no older one hides a newer one.
    EXPECT_EQ(checkpoint_incompleteness(d.string()), "");
    EXPECT_FALSE(fs::exists(with_suffix(d, ".old")));
    for (const std::string& w : row.words)
      if (!w.empty()) EXPECT_TRUE(fs::exists(with_suffix(d, w.c_str()))) << w;
  }
}

}  // namespace
}  // namespace bb
