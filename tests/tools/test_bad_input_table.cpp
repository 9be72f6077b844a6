// Bad input to the tools, one row per bad command line or bad input file: the
// tool, its arguments, the exit code and the words the message must contain.
// Every row runs under a timeout (no input may hang), and no row may exit 0
// with a NaN loss. Covered: bare words, unknown keys, non-finite floats,
// out-of-range ints, a directory given for a file, missing files, empty and
// invalid tokens files, huge token ids, bad parallel sizes, bad pipeline
// layouts and microbatch counts, context parallelism where it cannot run,
// bb-convert commands, output folders and checkpoints, training checkpoints
// of another model or config, missing an optimizer file or with metadata
// that does not cover a tensor, MoE models: ep not
// dividing the experts, top-k above the expert count, a checkpoint holding a
// layer's experts in both layouts; DeepSeek-V3 fields out of range and MTP;
// LoRA: unknown target modules and expert weights, bad ranks, an adapter for
// another base model, dropout with DoRA or on the experts, a merged export of expert adapters.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "bumblebee/primitive/ckpt/hf_checkpoint.h"
#include "bumblebee/runtime/checkpoint_files.h"
#include "tests/tools/tool_runner.h"

namespace bb::test {
namespace {

namespace fs = std::filesystem;

constexpr int kTimeoutS = 60;   // a row that runs this long is a hang

struct Row {
  std::string name;   // the gtest parameter name
  std::string tool;   // under build/bin/
  std::string args;   // {fx}: the qwen3_gqa fixture, {tmp}: the scratch folder below
  int code;           // expected exit code (1: one error line from run_tool)
  std::string words;  // the message must contain them, after the same substitutions
  int ranks = 1;      // > 1: under mpirun
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.tool << " " << row.args; }

// Scratch inputs shared by the rows: the bad files and folders they name.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("bb_bad_input_table_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "adir");
    auto write = [&](const fs::path& p, const std::string& text) {
      fs::create_directories(p.parent_path());
      std::ofstream(p) << text;
    };
    write(d / "empty.json", "");
    write(d / "four_rows.json", "[[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 2, 3]]");
    write(d / "empty_list.json", "[]");
    write(d / "invalid.json", "[[1, 2");
    write(d / "huge_id.json", "[[1, 18446744073709551615, 3]]");
    write(d / "negative_id.json", "[[1, -1, 3]]");
    write(d / "oov_id.json", "[[1, 2, 131]]");
    write(d / "ragged.json", "[[1, 2, 3], [1, 2]]");
    write(d / "strings.json", "[[\"a\", \"b\"]]");
    write(d / "empty_row.json", "[[1, 2], []]");
    write(d / "fraction.json", "[[1, 2.5]]");
    write(d / "object.json", "{\"tokens\": [[1, 2]]}");
    write(d / "not_json.json", "{");
    const std::string config = fs::path(std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa/config.json").string();
    // An HF folder whose single weights file, or the shard its index names, is a folder.
    fs::create_directories(d / "hf_shard_is_dir" / "model.safetensors");
    fs::copy_file(config, d / "hf_shard_is_dir" / "config.json");
    fs::create_directories(d / "hf_index_shard_is_dir" / "shard-1.safetensors");
    fs::copy_file(config, d / "hf_index_shard_is_dir" / "config.json");
    write(d / "hf_index_shard_is_dir" / "model.safetensors.index.json",
          R"({"weight_map": {"model.norm.weight": "shard-1.safetensors"}})");
    fs::create_directories(d / "hf_config_is_dir" / "config.json");
    write(d / "hf_config_not_json" / "config.json", "{\"model_type\": ");
    // bb-convert: a folder that is not a checkpoint, and a training
    // checkpoint whose model weights file is gone.
    write(d / "notackpt" / "notes.txt", "mine");
    const ToolResult made = run_command(tool("bb-convert") + " hf_to_bb in=" + fs::path(config).parent_path().string() +
                                        " out=" + (d / "ck_missing_shard").string());
    if (made.code != 0) ADD_FAILURE() << made.out;
    fs::remove(d / "ck_missing_shard" / "state" / "rank-00000.safetensors");
    // Training checkpoints of qwen3_gqa whose state/metadata.json (manifest
    // rewritten) lacks the Adam first moments, or one master tensor.
    const ToolResult good = run_command(tool("bb-convert") + " hf_to_bb in=" + fs::path(config).parent_path().string() +
                                        " out=" + (d / "ck_good").string());
    if (good.code != 0) ADD_FAILURE() << good.out;
    auto drop_tensors = [&](const std::string& ck, const std::string& prefix) {
      fs::copy(d / "ck_good", d / ck, fs::copy_options::recursive);
      const fs::path metadata = d / ck / "state" / "metadata.json";
      nlohmann::json j = nlohmann::json::parse(std::ifstream(metadata));
      for (auto it = j["tensors"].begin(); it != j["tensors"].end();)
        it = it.key().starts_with(prefix) ? j["tensors"].erase(it) : std::next(it);
      std::ofstream(metadata) << j.dump(1);
      fs::remove(d / ck / "manifest.json");
      write_checkpoint_manifest((d / ck).string());
    };
    drop_tensors("ck_missing_moments", "exp_avg/");
    drop_tensors("ck_uncovered", "master/model.norm.weight");
    // A qwen3_moe checkpoint whose layer 0 holds its experts fused and one per-expert tensor too.
    {
      const std::string fixtures = std::string(BB_SOURCE_DIR) + "/tests/fixtures/";
      const fs::path mixed = d / "moe_mixed_layouts";
      fs::create_directories(mixed);
      fs::copy_file(fixtures + "qwen3_moe_fused/config.json", mixed / "config.json");
      const HFCheckpoint fused = HFCheckpoint::open(fixtures + "qwen3_moe_fused");
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const std::string& name : fused.names()) tensors.emplace_back(name, fused.get(name));
      const std::string per_expert = "model.layers.0.mlp.experts.0.gate_proj.weight";
      tensors.emplace_back(per_expert, HFCheckpoint::open(fixtures + "qwen3_moe_experts").get(per_expert));
      save_hf_checkpoint(mixed.string(), tensors);
    }
    // An indexed dataset whose .idx is a folder.
    write(d / "ds_idx_is_dir.bin", "");
    fs::create_directories(d / "ds_idx_is_dir.idx");
    return d;
  }();
  return dir;
}

// The scratch folder goes when the test program ends.
class RemoveScratch : public ::testing::Environment {
 public:
  void TearDown() override { fs::remove_all(scratch()); }
};
[[maybe_unused]] ::testing::Environment* const kRemoveScratch = ::testing::AddGlobalTestEnvironment(new RemoveScratch);

std::string substitute(std::string s) {
  const std::string fx = std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa";
  s = std::regex_replace(s, std::regex("\\{fx\\}"), fx);
  return std::regex_replace(s, std::regex("\\{tmp\\}"), scratch().string());
}

const std::string kCorrectness = "hf_path={fx} tokens={fx}/tokens.json ";
const std::string kMoe =
    "hf_path=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_moe_experts tokens=" + std::string(BB_SOURCE_DIR) +
    "/tests/fixtures/qwen3_moe_experts/tokens.json ";
const std::string kDeepseek = "hf_path=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/deepseek_v3_qproj tokens=" +
                              std::string(BB_SOURCE_DIR) + "/tests/fixtures/deepseek_v3_qproj/tokens.json ";
const std::string kBench = "backend=bb hf_path={fx} bench.seq_len=8 bench.warmup=0 ";
const std::string kTrain = "recipe=recipes/qwen3_tiny_pretrain.json output.dir={tmp}/train_out train.steps=2 "
                           "optimizer.lr_warmup_steps=1 ";
const std::string kSft = "recipe=recipes/qwen3_tiny_sft.json output.dir={tmp}/sft_out train.steps=2 "
                         "optimizer.lr_warmup_steps=1 ";
const std::string kPreprocess = "preprocess input=data/corpus.jsonl tokenizer=data/tokenizer.json out={tmp}/ds ";

// Every float key of the runtime schema: none takes a non-finite value.
const char* const kFloatKeys[] = {
    "backend.temperature", "backend.router_aux_loss_coef", "optimizer.lr",           "optimizer.min_lr",
    "optimizer.clip_grad", "optimizer.weight_decay",       "optimizer.lr_warmup_init", "optimizer.adam_beta1",
    "optimizer.adam_beta2", "optimizer.adam_eps",          "optimizer.offload_fraction"};

std::vector<Row> rows() {
  std::vector<Row> r = {
      // Bare words: `help` alone is the one word without '=' a tool takes.
      {"correctness_bare_word", "bb-correctness", kCorrectness + "steps", 1, "argument 'steps' is not key=value"},
      {"correctness_help_among_keys", "bb-correctness", kCorrectness + "help", 1, "argument 'help' is not key=value"},
      {"bench_bare_word", "bb-bench", kBench + "garbage", 1, "argument 'garbage' is not key=value"},
      {"train_bare_word", "bb-train", kTrain + "garbage", 1, "argument 'garbage' is not key=value"},
      {"data_preprocess_bare_word", "bb-data", kPreprocess + "garbage", 1, "argument 'garbage' is not key=value"},
      {"data_no_command", "bb-data", "", 1, "no command given"},
      {"data_unknown_command", "bb-data", "garbage input=x", 1, "unknown command 'garbage'"},
      {"data_inspect_extra_word", "bb-data", "inspect {tmp}/ds extra", 1, "inspect takes one PREFIX"},

      // Unknown keys name the nearest valid one.
      {"correctness_unknown_key", "bb-correctness", kCorrectness + "optimizer.learning_rate=1", 1,
       "unknown key 'optimizer.learning_rate'"},
      {"bench_unknown_key", "bb-bench", kBench + "bench.step=3", 1, "unknown key 'bench.step'; did you mean 'bench.steps'"},
      {"train_unknown_key", "bb-train", kTrain + "train.step=3", 1,
       "unknown recipe key 'train.step'; did you mean 'train.steps'"},
      {"data_unknown_key", "bb-data", kPreprocess + "worker=2", 1, "unknown key 'worker'; did you mean 'workers'"},
      {"key_given_twice", "bb-correctness", kCorrectness + "steps=1 steps=2", 1, "key 'steps' given twice"},

      // Non-finite floats are rejected at parse time, as written.
      {"bench_lr_inf", "bb-bench", kBench + "optimizer.lr=inf", 1, "'inf' is not a finite number"},
      {"train_lr_inf", "bb-train", kTrain + "optimizer.lr=inf", 1,
       "recipe key 'optimizer.lr': 'inf' is not a finite number"},
      {"train_clip_grad_nan", "bb-train", kTrain + "optimizer.clip_grad=nan", 1, "'nan' is not a finite number"},
      {"correctness_clip_grad_minus_inf", "bb-correctness", kCorrectness + "optimizer.clip_grad=-inf", 1,
       "'-inf' is not a finite number"},

      // Out-of-range ints are reported as written.
      {"correctness_tp_overflows_int32", "bb-correctness", kCorrectness + "backend.parallel.tp=99999999999", 1,
       "'99999999999' does not fit in a 32-bit integer"},
      {"bench_tp_overflows_int32", "bb-bench", kBench + "backend.parallel.tp=99999999999", 1,
       "'99999999999' does not fit in a 32-bit integer"},
      {"train_tp_overflows_int32", "bb-train", kTrain + "parallel.tp=99999999999", 1,
       "recipe key 'parallel.tp': '99999999999' does not fit in a 32-bit integer"},
      {"correctness_steps_overflow_int64", "bb-correctness", kCorrectness + "steps=99999999999999999999", 1,
       "'99999999999999999999' does not fit in a 64-bit integer"},
      {"correctness_steps_negative", "bb-correctness", kCorrectness + "steps=-1", 1,
       "key 'steps': '-1' is out of range (needs steps >= 0)"},
      {"bench_steps_zero", "bb-bench", kBench + "bench.steps=0", 1, "bench.steps >= 1"},
      {"bench_offload_fraction_negative", "bb-bench", kBench + "optimizer.offload_fraction=-0.5", 1,
       "needs 0 <= optimizer.offload_fraction <= 1"},
      {"bench_offload_fraction_above_one", "bb-bench", kBench + "optimizer.offload_fraction=1.5", 1,
       "needs 0 <= optimizer.offload_fraction <= 1"},
      {"data_workers_zero", "bb-data", kPreprocess + "workers=0", 1, "workers >= 1"},

      // A directory where a file is expected names the path and what it is for.
      {"correctness_tokens_dir", "bb-correctness", "hf_path={fx} tokens={tmp}/adir", 1,
       "tokens file {tmp}/adir is a directory, not a file"},
      {"correctness_config_json_dir", "bb-correctness", "hf_path={tmp}/hf_config_is_dir tokens={fx}/tokens.json", 1,
       "model config {tmp}/hf_config_is_dir/config.json is a directory, not a file"},
      {"correctness_weights_file_dir", "bb-correctness", "hf_path={tmp}/hf_shard_is_dir tokens={fx}/tokens.json", 1,
       "safetensors file {tmp}/hf_shard_is_dir/model.safetensors is a directory, not a file"},
      {"correctness_index_shard_dir", "bb-correctness",
       "hf_path={tmp}/hf_index_shard_is_dir tokens={fx}/tokens.json", 1,
       "safetensors file {tmp}/hf_index_shard_is_dir/shard-1.safetensors is a directory, not a file"},
      {"train_config_json_dir", "bb-train", kTrain + "model.hf_path={tmp}/hf_config_is_dir", 1,
       "model config {tmp}/hf_config_is_dir/config.json is a directory, not a file"},
      {"train_recipe_dir", "bb-train", "recipe={tmp}/adir", 1, "recipe {tmp}/adir is a directory, not a file"},
      {"train_data_jsonl_dir", "bb-train", kTrain + "data.jsonl={tmp}/adir", 1,
       "data.jsonl {tmp}/adir is a directory, not a file"},
      {"train_tokenizer_dir", "bb-train", kTrain + "data.tokenizer={tmp}/adir", 1,
       "data.tokenizer {tmp}/adir is a directory, not a file"},
      {"train_sft_data_jsonl_dir", "bb-train", kSft + "data.jsonl={tmp}/adir", 1,
       "data.jsonl {tmp}/adir is a directory, not a file"},
      {"train_dataset_idx_dir", "bb-train", kTrain + "data.jsonl= data.prefixes={tmp}/ds_idx_is_dir", 1,
       "data.prefixes dataset file {tmp}/ds_idx_is_dir.idx is a directory, not a file"},
      {"data_input_dir", "bb-data", "preprocess input={tmp}/adir tokenizer=data/tokenizer.json out={tmp}/ds", 1,
       "JSONL input {tmp}/adir is a directory, not a file"},
      {"data_tokenizer_dir", "bb-data", "preprocess input=data/corpus.jsonl tokenizer={tmp}/adir out={tmp}/ds", 1,
       "tokenizer file {tmp}/adir is a directory, not a file"},
      {"data_inspect_idx_dir", "bb-data", "inspect {tmp}/ds_idx_is_dir", 1,
       "indexed dataset file {tmp}/ds_idx_is_dir.idx is a directory, not a file"},

      // Missing files.
      {"correctness_tokens_missing", "bb-correctness", "hf_path={fx} tokens={tmp}/missing.json", 1,
       "tokens file {tmp}/missing.json does not exist"},
      {"correctness_hf_path_missing", "bb-correctness", "hf_path={tmp}/missing tokens={fx}/tokens.json", 1,
       "no config.json in hf_path {tmp}/missing"},
      {"correctness_hf_path_without_config", "bb-correctness", "hf_path={tmp}/adir tokens={fx}/tokens.json", 1,
       "no config.json in hf_path {tmp}/adir"},
      {"correctness_config_not_json", "bb-correctness", "hf_path={tmp}/hf_config_not_json tokens={fx}/tokens.json",
       1, "{tmp}/hf_config_not_json/config.json is not valid JSON"},
      {"correctness_tokens_required", "bb-correctness", "hf_path={fx}", 1, "tokens=FILE.json is required"},
      {"train_recipe_missing", "bb-train", "recipe={tmp}/missing.json", 1, "recipe {tmp}/missing.json does not exist"},
      {"train_recipe_not_json", "bb-train", "recipe={tmp}/not_json.json", 1,
       "recipe {tmp}/not_json.json is not valid JSON"},
      {"train_recipe_required", "bb-train", "train.steps=2", 1, "recipe=FILE is required"},
      {"data_input_missing", "bb-data", "preprocess input={tmp}/missing.jsonl tokenizer=data/tokenizer.json out={tmp}/ds",
       1, "JSONL input {tmp}/missing.jsonl does not exist"},
      {"data_tokenizer_missing", "bb-data", "preprocess input=data/corpus.jsonl tokenizer={tmp}/missing.json out={tmp}/ds",
       1, "tokenizer file {tmp}/missing.json does not exist"},
      {"data_inspect_missing", "bb-data", "inspect {tmp}/missing", 1,
       "indexed dataset file {tmp}/missing.idx does not exist"},
      {"data_out_required", "bb-data", "preprocess input=data/corpus.jsonl tokenizer=data/tokenizer.json", 1,
       "out= is missing"},

      // Empty and invalid tokens files, huge and out-of-vocabulary ids.
      {"tokens_empty_file", "bb-correctness", "hf_path={fx} tokens={tmp}/empty.json", 1,
       "tokens file {tmp}/empty.json is not valid JSON"},
      {"tokens_empty_list", "bb-correctness", "hf_path={fx} tokens={tmp}/empty_list.json", 1,
       "must hold a non-empty list of token-id lists"},
      {"tokens_invalid_json", "bb-correctness", "hf_path={fx} tokens={tmp}/invalid.json", 1, "is not valid JSON"},
      {"tokens_ragged", "bb-correctness", "hf_path={fx} tokens={tmp}/ragged.json", 1, "sequences differ in length"},
      {"tokens_not_integers", "bb-correctness", "hf_path={fx} tokens={tmp}/strings.json", 1,
       "token ids must be integers, got \"a\""},
      {"tokens_empty_row", "bb-correctness", "hf_path={fx} tokens={tmp}/empty_row.json", 1,
       "every entry must be a non-empty list of ids"},
      {"tokens_fraction", "bb-correctness", "hf_path={fx} tokens={tmp}/fraction.json", 1,
       "token ids must be integers, got 2.5"},
      {"tokens_object", "bb-correctness", "hf_path={fx} tokens={tmp}/object.json", 1,
       "must hold a non-empty list of token-id lists"},
      {"tokens_id_2_pow_64_minus_1", "bb-correctness", "hf_path={fx} tokens={tmp}/huge_id.json", 1,
       "token id 18446744073709551615 (row 0, position 1) is outside the vocabulary"},
      {"tokens_negative_id", "bb-correctness", "hf_path={fx} tokens={tmp}/negative_id.json", 1,
       "token id -1 at position 1 is outside the vocabulary [0, 131)"},
      {"tokens_id_equal_to_vocab_size", "bb-correctness", "hf_path={fx} tokens={tmp}/oov_id.json", 1,
       "token id 131 at position 2 is outside the vocabulary [0, 131)"},

      // Bad parallel sizes: tp larger than the world, tp not dividing the heads (on every rank, no hang).
      {"correctness_tp_above_world_size", "bb-correctness", kCorrectness + "backend.parallel.tp=2", 1,
       "world size 1 is not divisible by tp*cp*pp = 2"},
      {"bench_tp_above_world_size", "bb-bench", kBench + "backend.parallel.tp=2", 1,
       "world size 1 is not divisible by tp*cp*pp = 2"},
      {"correctness_tp_not_dividing_heads", "bb-correctness", kCorrectness + "backend.parallel.tp=3", 1,
       "num_attention_heads 4 is not divisible by tp 3", 3},

      // Bad pipeline layouts and microbatch counts (on every rank, no hang).
      {"correctness_pp_microbatches_below_pp", "bb-correctness", kCorrectness + "backend.parallel.pp=2", 1,
       "num_microbatches 1 < pp 2: a pipeline needs at least one microbatch per stage", 2},
      {"correctness_pp_interleaved_microbatches", "bb-correctness",
       "hf_path={fx} tokens={tmp}/four_rows.json backend.parallel.pp=2 backend.parallel.vpp=2 "
       "'backend.parallel.pp_layout=E|t|t|L' num_microbatches=3",
       1, "the interleaved schedule (vpp 2) needs num_microbatches divisible by pp 2, got 3", 2},
      {"correctness_pp_layout_layer_count", "bb-correctness",
       kCorrectness + "backend.parallel.pp=2 'backend.parallel.pp_layout=E,t|t*2,L' num_microbatches=2", 1,
       "pp_layout 'E,t|t*2,L' places 3 decoder layers, but the model has num_hidden_layers = 2", 2},
      {"correctness_pp_layout_stage_count", "bb-correctness",
       kCorrectness + "backend.parallel.pp=2 'backend.parallel.pp_layout=E,t,t,L' num_microbatches=2", 1,
       "pp_layout 'E,t,t,L' has 1 stages, but pp * vpp = 2 (pp 2, vpp 1)", 2},
      {"correctness_pp_layout_empty_stage", "bb-correctness",
       kCorrectness + "backend.parallel.pp=2 'backend.parallel.pp_layout=E,t,t,L|' num_microbatches=2", 1,
       "stage 1 (''): the stage is empty", 2},
      {"convert_no_command", "bb-convert", "", 1, "no command given"},
      {"convert_unknown_command", "bb-convert", "garbage in={fx} out={tmp}/o", 1, "unknown command 'garbage'"},
      {"convert_no_out", "bb-convert", "hf_to_bb in={fx}", 1, "in=DIR and out=DIR are required"},
      {"convert_out_not_a_checkpoint", "bb-convert", "hf_to_bb in={fx} out={tmp}/notackpt", 1,
       "out={tmp}/notackpt exists and is not a training checkpoint (no trainer_state.json)"},
      {"convert_out_not_an_hf_folder", "bb-convert", "bb_to_hf in={tmp}/ck_missing_shard out={tmp}/notackpt", 1,
       "out={tmp}/notackpt exists and is not an HF model folder (no config.json)"},
      {"convert_in_not_a_checkpoint", "bb-convert", "bb_to_hf in={fx} out={tmp}/o", 1, "manifest.json is missing"},
      {"convert_missing_shard", "bb-convert", "bb_to_hf in={tmp}/ck_missing_shard out={tmp}/o", 1,
       "state/rank-00000.safetensors is missing"},
      {"convert_bad_dtype", "bb-convert", "bb_to_hf in={tmp}/ck_missing_shard out={tmp}/o dtype=fp8", 1,
       "key 'dtype': 'fp8' is not one of: source, bf16, fp32"},
      {"convert_bad_shard_size", "bb-convert", "bb_to_hf in={tmp}/ck_missing_shard out={tmp}/o export.max_shard_bytes=5XB",
       1, "key 'export.max_shard_bytes': '5XB' has an unknown unit 'XB'"},
      {"convert_reshard_out_not_a_checkpoint", "bb-convert", "reshard in={tmp}/ck_good out={tmp}/notackpt", 1,
       "out={tmp}/notackpt exists and is not a training checkpoint (no trainer_state.json)"},
      {"convert_reshard_in_not_a_checkpoint", "bb-convert", "reshard in={tmp}/adir out={tmp}/o", 1,
       "in={tmp}/adir is not a training checkpoint (no trainer_state.json)"},
      // Training checkpoints that do not fit the model, or lack what they must hold.
      {"resume_other_model", "bb-correctness",
       "hf_path=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/llama3_gqa tokens=" + std::string(BB_SOURCE_DIR) +
           "/tests/fixtures/llama3_gqa/tokens.json steps=1 "
       "resume_from={tmp}/ck_good", 1, "holds a model with another config than the one built: "},
      {"resume_incompatible_config", "bb-correctness",
       kCorrectness + "steps=1 resume_from={tmp}/ck_good 'backend.model_overrides={\"rms_norm_eps\": 1e-5}'", 1,
       "another config than the one built: rms_norm_eps is 1e-06 there and 1e-05 here"},
      {"resume_metadata_missing_moments", "bb-correctness", kCorrectness + "steps=1 resume_from={tmp}/ck_missing_moments",
       1, "{tmp}/ck_missing_moments/state/metadata.json has no tensor 'exp_avg/"},
      {"resume_metadata_not_covering_a_tensor", "bb-correctness", kCorrectness + "steps=1 resume_from={tmp}/ck_uncovered",
       1, "{tmp}/ck_uncovered/state/metadata.json has no tensor 'master/model.norm.weight', which this model holds "
          "with optimizer state"},
      {"correctness_pp_balanced_too_few_layers", "bb-correctness",
       kCorrectness + "backend.parallel.pp=4 num_microbatches=4", 1,
       "num_hidden_layers 2 cannot fill pp * vpp = 4 pipeline stages", 4},
      // Context parallelism where it cannot run: the ref backend (one rank), a
      // MoE model with a load-balancing loss, a world cp does not divide.
      {"correctness_cp_with_ref_backend", "bb-correctness", kCorrectness + "backend=ref backend.parallel.cp=2", 1,
       "backend=ref runs on one rank; backend.parallel.tp (1) and cp (2) must be 1"},
      {"correctness_cp_with_experts", "bb-correctness",
       "hf_path=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_moe_experts tokens={fx}/tokens.json "
       "backend.parallel.cp=2", 1, "has router statistics over the whole microbatch (a load-balancing loss", 2},
      {"correctness_cp_above_world_size", "bb-correctness", kCorrectness + "backend.parallel.cp=4", 1,
       "world size 2 is not divisible by tp*cp*pp = 4", 2},
      // MoE models (on every rank, no hang).
      {"correctness_moe_ep_not_dividing_experts", "bb-correctness", kMoe + "backend.parallel.ep=4", 1,
       "expert parallelism: backend.parallel.ep = 4 does not divide the model's 6 experts", 4},
      {"correctness_moe_topk_above_experts", "bb-correctness",
       kMoe + "'backend.model_overrides={\"num_experts_per_tok\": 7}'", 1,
       "qwen3_moe: num_experts_per_tok 7 must lie in [1, num_experts = 6]"},
      {"correctness_moe_mixed_expert_layouts", "bb-correctness",
       "hf_path={tmp}/moe_mixed_layouts tokens=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_moe_fused/tokens.json", 1,
       "layer 0 holds its experts both fused ('model.layers.0.mlp.experts.gate_up_proj') and per expert "
       "('model.layers.0.mlp.experts.0.gate_proj.weight')"},
      // DeepSeek-V3 config fields out of range, an MTP layer the checkpoint lacks, a negative MTP loss weight.
      {"correctness_dsv3_kv_lora_rank_zero", "bb-correctness",
       kDeepseek + "'backend.model_overrides={\"kv_lora_rank\": 0}'", 1, "deepseek_v3: kv_lora_rank must be > 0, got 0"},
      {"correctness_dsv3_topk_group_above_n_group", "bb-correctness",
       kDeepseek + "'backend.model_overrides={\"topk_group\": 5}'", 1,
       "deepseek_v3: topk_group 5 must lie in [1, n_group = 4]"},
      {"correctness_dsv3_experts_not_dividing_groups", "bb-correctness",
       kDeepseek + "'backend.model_overrides={\"n_group\": 3}'", 1,
       "deepseek_v3: n_routed_experts 8 is not divisible by n_group 3"},
      {"correctness_dsv3_mtp", "bb-correctness",
       kDeepseek + "'backend.model_overrides={\"num_nextn_predict_layers\": 1}'", 1,
       "lacks tensor 'model.layers.3."},
      {"correctness_dsv3_mtp_scale_negative", "bb-correctness", kDeepseek + "backend.mtp_loss_scaling_factor=-1", 1,
       "backend.mtp_loss_scaling_factor"},
      {"correctness_moe_aux_loss_type", "bb-correctness",
       kMoe + "'backend.model_overrides={\"moe_aux_loss_type\": \"switch\"}'", 1,
       "moe_aux_loss_type 'switch' is not one of hf, megatron"},
      {"correctness_moe_hf_aux_loss_under_pp", "bb-correctness", kMoe + "backend.parallel.pp=2 num_microbatches=2", 1,
       "the hf form of the router auxiliary loss couples every layer", 2},
      // LoRA (peft.*): a module the model lacks, rank 0 or above the layer, an
      // adapter made for another base model, a LoRA adapter for a DoRA run and
      // the other way round, and experts (not yet).
      {"correctness_lora_unknown_target", "bb-correctness", kCorrectness + "peft.type=lora peft.target_modules=q_proj,qkv",
       1, "peft.target_modules names 'qkv', which is no linear module of the model; valid: q_proj, k_proj, v_proj, "
          "o_proj, gate_proj, up_proj, down_proj, all-linear"},
      {"correctness_lora_rank_zero", "bb-correctness", kCorrectness + "peft.type=lora peft.rank=0", 1, "peft.rank"},
      {"correctness_lora_rank_above_layer", "bb-correctness",
       kCorrectness + "peft.type=lora peft.target_modules=o_proj peft.rank=49", 1,
       "peft.rank 49 is larger than the layer 'model.layers.0.self_attn.o_proj.weight' of shape [48, 64] allows"},
      {"correctness_lora_adapter_of_other_base", "bb-correctness",
       "hf_path=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/llama3_gqa tokens=" + std::string(BB_SOURCE_DIR) + "/tests/fixtures/llama3_gqa/tokens.json peft.type=lora "
       "peft.target_modules=all-linear peft.rank=4 peft.alpha=8 peft.adapter_path=" + std::string(BB_SOURCE_DIR) +
       "/tests/fixtures/qwen3_gqa_lora", 1,
       "adapter tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 48], the "
       "model's parameter is [4, 36] (the adapter was made for 'tests/fixtures/qwen3_gqa')"},
      {"correctness_lora_adapter_rank_differs", "bb-correctness",
       kCorrectness + "peft.type=lora peft.target_modules=all-linear peft.rank=8 peft.alpha=8 peft.adapter_path=" +
       std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa_lora", 1, "adapter_config.json: r 4 differs from peft.rank 8"},
      {"correctness_dora_run_with_lora_adapter", "bb-correctness",
       kCorrectness + "peft.type=dora peft.target_modules=all-linear peft.rank=4 peft.alpha=8 peft.adapter_path=" +
       std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa_lora", 1,
       "adapter_config.json: use_dora false differs from the run's peft.type (dora)"},
      {"correctness_lora_run_with_dora_adapter", "bb-correctness",
       kCorrectness + "peft.type=lora peft.target_modules=all-linear peft.rank=4 peft.alpha=8 peft.adapter_path=" +
       std::string(BB_SOURCE_DIR) + "/tests/fixtures/qwen3_gqa_dora", 1,
       "adapter_config.json: use_dora true differs from the run's peft.type (lora)"},
      // The fused experts are target_parameters (peft's ParamWrapper), never target_modules.
      {"correctness_lora_up_proj_on_moe", "bb-correctness", kMoe + "peft.type=lora peft.target_modules=up_proj", 1,
       "peft.target_modules names 'up_proj', which no linear layer of this model has (the fused MoE experts are "
       "peft.target_parameters"},
      {"correctness_lora_unknown_expert_parameter", "bb-correctness",
       kMoe + "peft.type=lora peft.target_modules=q_proj peft.target_parameters=mlp.experts.w1", 1,
       "peft.target_parameters names 'mlp.experts.w1', which is no expert weight of the model"},
      {"correctness_lora_experts_with_dropout", "bb-correctness",
       kMoe + "peft.type=lora peft.target_modules=q_proj peft.target_parameters=mlp.experts.down_proj peft.dropout=0.1",
       1, "peft.target_parameters (LoRA on the expert weights) needs peft.type=lora and peft.dropout=0"},
      {"correctness_lora_experts_merge_on_export", "bb-correctness",
       kMoe + "peft.type=lora peft.target_modules=q_proj peft.target_parameters=mlp.experts.down_proj "
       "peft.merge_on_export=true params_out={tmp}/merged_experts", 1,
       "peft.merge_on_export with peft.target_parameters (adapters on the MoE experts) is not built"},
      {"correctness_dora_with_dropout", "bb-correctness", kCorrectness + "peft.type=dora peft.dropout=0.1", 1,
       "peft.dropout 0.1 with peft.type=dora is not supported"},
  };
  for (const char* key : kFloatKeys) {
    std::string name = std::string("correctness_nan_") + key;
    std::replace(name.begin(), name.end(), '.', '_');
    r.push_back({name, "bb-correctness", kCorrectness + key + "=nan", 1,
                 std::string("key '") + key + "': 'nan' is not a finite number"});
  }
  return r;
}

// A loss printed as null or nan: what a NaN in a model turns into.
bool shows_nan_loss(const std::string& out) {
  static const std::regex nan_loss(R"(loss[^\n]*\b(null|nan)\b)", std::regex::icase);
  return std::regex_search(out, nan_loss);
}

class BadInputTable : public ::testing::TestWithParam<Row> {};

TEST_P(BadInputTable, FailsWithTheWords) {
  const Row& row = GetParam();
  std::string cmd = "cd " BB_SOURCE_DIR " && ";
  if (row.ranks > 1) cmd += mpirun(row.ranks);
  cmd += tool(row.tool) + " " + substitute(row.args);
  const ToolResult r = run_command(cmd, kTimeoutS);
  ASSERT_NE(r.code, 124) << "timed out after " << kTimeoutS << " s: " << cmd << "\n" << r.out;
  EXPECT_FALSE(r.code == 0 && shows_nan_loss(r.out)) << "exit 0 with a NaN loss: " << cmd << "\n" << r.out;
  EXPECT_EQ(r.code, row.code) << cmd << "\n" << r.out;
  EXPECT_NE(r.out.find(substitute(row.words)), std::string::npos)
      << cmd << "\nexpected the words: " << substitute(row.words) << "\ngot:\n" << r.out;
}

INSTANTIATE_TEST_SUITE_P(Tools, BadInputTable, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

TEST(BadInputTableRunner, RecognisesANanLoss) {
  EXPECT_TRUE(shows_nan_loss(R"({"loss": null, "grad_norm": 1.0})"));
  EXPECT_TRUE(shows_nan_loss("step 3 | loss nan | grad_norm 1.2"));
  EXPECT_TRUE(shows_nan_loss(R"({"losses": [2.1, null]})"));
  EXPECT_FALSE(shows_nan_loss(R"({"loss": 4.87, "grad_norm": 1.0})"));
  EXPECT_FALSE(shows_nan_loss("step 3 | loss 4.87 | grad_norm 1.2"));
}

}  // namespace
}  // namespace bb::test
