// Tests of ConfigSchema: every runtime key round-trips into RuntimeConfig, bad
// values name the key and the value, tool keys and default overrides, bare
// words, and the help text.
#include "bumblebee/runtime/config_schema.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <iterator>

#include "bumblebee/core/error.h"

namespace bb {
namespace {

using json = nlohmann::json;

ConfigSchema runtime_schema() {
  ConfigSchema s("bb-test", "bb-test hf_path=DIR [key=value ...]");
  s.add_runtime_keys();
  return s;
}

// The message of the bb::Error `f` throws, or "" when it does not throw.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct RoundTrip {
  std::string key, text;
  std::function<bool(const RuntimeConfig&)> landed;
};

// One non-default value per runtime key and where it must land.
const std::vector<RoundTrip>& round_trips() {
  static const std::vector<RoundTrip> table = {
      {"backend", "ref", [](const RuntimeConfig& c) { return c.backend == "ref"; }},
      {"hf_path", "/m/q=3", [](const RuntimeConfig& c) { return c.hf_path == "/m/q=3"; }},
      {"plugin", "a.so,b/c.so",
       [](const RuntimeConfig& c) { return c.plugins == std::vector<std::string>{"a.so", "b/c.so"}; }},
      {"backend.model_name", "qwen3", [](const RuntimeConfig& c) { return c.backend_cfg.model_name == "qwen3"; }},
      {"backend.impl", "other", [](const RuntimeConfig& c) { return c.backend_cfg.impl == "other"; }},
      {"backend.device", "cuda:1", [](const RuntimeConfig& c) { return c.backend_cfg.device == "cuda:1"; }},
      {"backend.dtype", "float64", [](const RuntimeConfig& c) { return c.backend_cfg.dtype == "float64"; }},
      {"backend.recompute", "full", [](const RuntimeConfig& c) { return c.backend_cfg.recompute == "full"; }},
      {"backend.recompute_modules", "core_attn,mlp",
       [](const RuntimeConfig& c) { return c.backend_cfg.recompute_modules == "core_attn,mlp"; }},
      {"backend.recompute_method", "uniform",
       [](const RuntimeConfig& c) { return c.backend_cfg.recompute_method == "uniform"; }},
      {"backend.recompute_num_layers", "3",
       [](const RuntimeConfig& c) { return c.backend_cfg.recompute_num_layers == 3; }},
      {"backend.fp32_residual_connection", "1",
       [](const RuntimeConfig& c) { return c.backend_cfg.fp32_residual_connection; }},
      {"backend.load_hf_weights", "false", [](const RuntimeConfig& c) { return !c.backend_cfg.load_hf_weights; }},
      {"backend.seed", "18446744073", [](const RuntimeConfig& c) { return c.backend_cfg.seed == 18446744073ull; }},
      {"backend.temperature", "0.7", [](const RuntimeConfig& c) { return c.backend_cfg.temperature == 0.7; }},
      {"backend.lm_head_chunk_tokens", "4096",
       [](const RuntimeConfig& c) { return c.backend_cfg.lm_head_chunk_tokens == 4096; }},
      {"backend.attention_backend", "flash",
       [](const RuntimeConfig& c) { return c.backend_cfg.attention_backend == "flash"; }},
      {"backend.deterministic", "true", [](const RuntimeConfig& c) { return c.backend_cfg.deterministic; }},
      {"backend.router_aux_loss_coef", "1e-3",
       [](const RuntimeConfig& c) { return c.backend_cfg.router_aux_loss_coef == std::optional<double>(1e-3); }},
      {"backend.mtp_loss_scaling_factor", "0.3",
       [](const RuntimeConfig& c) { return c.backend_cfg.mtp_loss_scaling_factor == std::optional<double>(0.3); }},
      {"backend.frozen_params", "model\\.embed_tokens\\..*",
       [](const RuntimeConfig& c) { return c.backend_cfg.frozen_params == "model\\.embed_tokens\\..*"; }},
      {"backend.impl_cfg", R"({"fused": true})",
       [](const RuntimeConfig& c) { return c.backend_cfg.impl_cfg == json({{"fused", true}}); }},
      {"backend.model_overrides", R"({"num_layers": 2})",
       [](const RuntimeConfig& c) { return c.backend_cfg.model_overrides == json({{"num_layers", 2}}); }},
      {"backend.parallel.tp", "4", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.tp == 4; }},
      {"backend.parallel.etp", "2", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.etp == 2; }},
      {"backend.parallel.ep", "8", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.ep == 8; }},
      {"backend.parallel.pp", "2", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.pp == 2; }},
      {"backend.parallel.vpp", "3", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.vpp == 3; }},
      {"backend.parallel.cp", "2", [](const RuntimeConfig& c) { return c.backend_cfg.parallel.cp == 2; }},
      {"backend.parallel.pp_layout", "E|t*5|t,m,L",
       [](const RuntimeConfig& c) { return c.backend_cfg.parallel.pp_layout == "E|t*5|t,m,L"; }},
      {"export.bucket_bytes", "512MiB",
       [](const RuntimeConfig& c) { return c.export_cfg.bucket_bytes == (uint64_t(512) << 20); }},
      {"export.max_shard_bytes", "100MB",
       [](const RuntimeConfig& c) { return c.export_cfg.max_shard_bytes == 100'000'000ull; }},
      {"export.dtype", "bf16", [](const RuntimeConfig& c) { return c.export_cfg.dtype == "bf16"; }},
      {"optimizer.optimizer", "adamw", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.optimizer == "adamw"; }},
      {"optimizer.lr", "3e-4", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr == 3e-4; }},
      {"optimizer.min_lr", "1e-5", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.min_lr == 1e-5; }},
      {"optimizer.clip_grad", "0", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.clip_grad == 0.0; }},
      {"optimizer.weight_decay", "0.1",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.weight_decay == 0.1; }},
      {"optimizer.no_weight_decay_1d", "false",
       [](const RuntimeConfig& c) { return !c.backend_cfg.optimizer.no_weight_decay_1d; }},
      {"optimizer.lr_warmup_steps", "20",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_warmup_steps == 20; }},
      {"optimizer.lr_warmup_init", "1e-6",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_warmup_init == 1e-6; }},
      {"optimizer.lr_decay_steps", "500",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_decay_steps == 500; }},
      {"optimizer.lr_decay_style", "WSD",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_decay_style == "WSD"; }},
      {"optimizer.lr_wsd_decay_style", "exponential",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_wsd_decay_style == "exponential"; }},
      {"optimizer.lr_wsd_decay_steps", "50",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.lr_wsd_decay_steps == 50; }},
      {"optimizer.total_training_steps", "1000",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.total_training_steps == 1000; }},
      {"optimizer.adam_beta1", "0.8", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.adam_beta1 == 0.8; }},
      {"optimizer.adam_beta2", "0.95",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.adam_beta2 == 0.95; }},
      {"optimizer.adam_eps", "1e-6", [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.adam_eps == 1e-6; }},
      {"optimizer.offload_fraction", "0.5",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.offload_fraction == 0.5; }},
      {"optimizer.exp_avg_dtype", "bf16",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.exp_avg_dtype == "bf16"; }},
      {"optimizer.exp_avg_sq_dtype", "bf16",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.exp_avg_sq_dtype == "bf16"; }},
      {"optimizer.main_grads_dtype", "bf16",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.main_grads_dtype == "bf16"; }},
      {"optimizer.main_params_dtype", "bf16",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.main_params_dtype == "bf16"; }},
      {"optimizer.grad_bucket_size", "1000",
       [](const RuntimeConfig& c) { return c.backend_cfg.optimizer.grad_bucket_size == 1000; }},
      {"peft.type", "lora", [](const RuntimeConfig& c) { return c.backend_cfg.peft.type == "lora"; }},
      {"peft.target_parameters", "mlp.experts.gate_up_proj",
       [](const RuntimeConfig& c) { return c.backend_cfg.peft.target_parameters == "mlp.experts.gate_up_proj"; }},
      {"peft.target_modules", "all-linear",
       [](const RuntimeConfig& c) { return c.backend_cfg.peft.target_modules == "all-linear"; }},
      {"peft.rank", "16", [](const RuntimeConfig& c) { return c.backend_cfg.peft.rank == 16; }},
      {"peft.alpha", "32", [](const RuntimeConfig& c) { return c.backend_cfg.peft.alpha == 32.0; }},
      {"peft.dropout", "0.1", [](const RuntimeConfig& c) { return c.backend_cfg.peft.dropout == 0.1; }},
      {"peft.use_rslora", "true", [](const RuntimeConfig& c) { return c.backend_cfg.peft.use_rslora; }},
      {"peft.adapter_path", "runs/adapter",
       [](const RuntimeConfig& c) { return c.backend_cfg.peft.adapter_path == "runs/adapter"; }},
      {"peft.merge_on_export", "true", [](const RuntimeConfig& c) { return c.backend_cfg.peft.merge_on_export; }},
  };
  return table;
}

TEST(ConfigSchema, EveryRuntimeKeyRoundTrips) {
  const ConfigSchema s = runtime_schema();
  std::set<std::string> tested;
  for (const RoundTrip& t : round_trips()) {
    ASSERT_TRUE(s.find(t.key)) << t.key;
    EXPECT_TRUE(tested.insert(t.key).second) << t.key << " twice in the table";
    const ConfigArgs a = s.parse({t.key + "=" + t.text});
    EXPECT_TRUE(t.landed(a.runtime)) << t.key << "=" << t.text;
    EXPECT_TRUE(a.has(t.key));
    // The value read back is the one the config holds; unset keys keep the struct's defaults.
    EXPECT_FALSE(t.landed(s.parse({}).runtime)) << t.key << ": the test value equals the default";
    EXPECT_EQ(a.value(t.key), parse_config_value(s.at(t.key), t.text));
  }
  for (const ConfigKey& k : s.keys()) EXPECT_TRUE(tested.count(k.name)) << k.name << " has no round-trip test";
}

TEST(ConfigSchema, DefaultsAreTheConfigStructs) {
  const ConfigSchema s = runtime_schema();
  const ConfigArgs a = s.parse({});
  const RuntimeConfig d;
  EXPECT_EQ(a.runtime.backend, d.backend);
  EXPECT_EQ(a.runtime.backend_cfg.optimizer.lr, d.backend_cfg.optimizer.lr);
  EXPECT_EQ(a.runtime.backend_cfg.optimizer.clip_grad, d.backend_cfg.optimizer.clip_grad);
  EXPECT_EQ(a.runtime.backend_cfg.seed, d.backend_cfg.seed);
  EXPECT_EQ(a.runtime.backend_cfg.optimizer.no_weight_decay_1d, d.backend_cfg.optimizer.no_weight_decay_1d);
  EXPECT_EQ(a.value("backend.parallel.tp"), 1);
  EXPECT_FALSE(a.has("backend.parallel.tp"));
  for (const ConfigKey& k : s.keys()) {
    EXPECT_FALSE(k.doc.empty()) << k.name;
    EXPECT_FALSE(k.overridden()) << k.name;
    EXPECT_EQ(a.value(k.name), k.default_value) << k.name;
  }
}

TEST(ConfigSchema, BadValuesNameKeyAndValue) {
  const ConfigSchema s = runtime_schema();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"backend.parallel.tp=99999999999", {"key 'backend.parallel.tp'", "'99999999999' does not fit in a 32-bit"}},
      {"backend.parallel.tp=0", {"backend.parallel.tp", "'0' is out of range", "backend.parallel.tp >= 1"}},
      {"backend.parallel.tp=two", {"backend.parallel.tp", "must be an integer, got 'two'"}},
      {"backend.parallel.tp=1.0", {"backend.parallel.tp", "must be an integer, got '1.0'"}},
      {"backend.parallel.etp=-1", {"backend.parallel.etp", "'-1' is out of range"}},
      {"backend.seed=99999999999999999999", {"backend.seed", "does not fit in a 64-bit integer"}},
      {"backend.seed=-1", {"backend.seed", "'-1' is out of range"}},
      {"optimizer.grad_bucket_size=0", {"optimizer.grad_bucket_size", "'0' is out of range"}},
      {"optimizer.lr=nan", {"optimizer.lr", "'nan' is not a finite number"}},
      {"optimizer.lr=inf", {"optimizer.lr", "'inf' is not a finite number"}},
      {"optimizer.clip_grad=-inf", {"optimizer.clip_grad", "'-inf' is not a finite number"}},
      {"backend.temperature=0", {"backend.temperature", "'0' is out of range", "backend.temperature > 0"}},
      {"backend.lm_head_chunk_tokens=-1", {"backend.lm_head_chunk_tokens", "'-1' is out of range"}},
      {"optimizer.lr=-1e-3", {"optimizer.lr", "'-1e-3' is out of range"}},
      {"optimizer.adam_beta2=1.5", {"optimizer.adam_beta2", "'1.5' is out of range", "<= 1"}},
      {"optimizer.adam_eps=0", {"optimizer.adam_eps", "'0' is out of range"}},
      {"optimizer.lr=fast", {"optimizer.lr", "must be a number, got 'fast'"}},
      {"optimizer.lr=1e-3abc", {"optimizer.lr", "must be a number, got '1e-3abc'"}},
      {"optimizer.lr=", {"optimizer.lr", "must be a number, got ''"}},
      {"optimizer.lr=1e999", {"optimizer.lr", "'1e999' is out of the range of a double"}},
      {"backend.router_aux_loss_coef=-1", {"backend.router_aux_loss_coef", "'-1' is out of range"}},
      {"backend.mtp_loss_scaling_factor=-0.1", {"backend.mtp_loss_scaling_factor", "'-0.1' is out of range"}},
      {"backend.fp32_residual_connection=yes", {"backend.fp32_residual_connection", "must be a boolean (true, false, 1 or 0), got 'yes'"}},
      {"backend.dtype=float16", {"backend.dtype", "'float16' is not one of: auto, float64, float32, bfloat16"}},
      {"backend.recompute=partial", {"backend.recompute", "'partial' is not one of"}},
      {"backend.recompute_method=interleaved", {"backend.recompute_method", "'interleaved' is not one of"}},
      {"backend.recompute_num_layers=-1", {"backend.recompute_num_layers"}},
      {"backend.attention_backend=triton", {"backend.attention_backend", "'triton' is not one of: auto, cudnn, flash"}},
      {"backend=fast", {"key 'backend'", "'fast' is not one of: bb, ref"}},
      {"optimizer.lr_decay_style=step", {"optimizer.lr_decay_style", "'step'"}},
      {"backend.model_overrides=[1]", {"backend.model_overrides", "must be an object (JSON), got '[1]'"}},
      {"backend.model_overrides={", {"backend.model_overrides", "'{' is not valid JSON"}},
  };
  for (const auto& [word, parts] : cases) {
    const std::string e = error_of([&] { s.parse({word}); });
    ASSERT_FALSE(e.empty()) << word << " was accepted";
    for (const std::string& p : parts) EXPECT_NE(e.find(p), std::string::npos) << word << ": '" << e << "' lacks '" << p << "'";
  }
}

TEST(ConfigSchema, BareWordsAreErrorsAndHelpIsAsked) {
  const ConfigSchema s = runtime_schema();
  EXPECT_NE(error_of([&] { s.parse({"hf_path=x", "garbage"}); }).find("argument 'garbage' is not key=value (bb-test help"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.parse({"tp=2"}); }).find("unknown key 'tp'; did you mean 'backend.parallel.tp'?"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.parse({"device=cuda"}); }).find("did you mean 'backend.device'?"), std::string::npos);
  std::vector<std::string> words = {"tool", "help"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_TRUE(asks_for_help(2, argv.data()));
  EXPECT_FALSE(asks_for_help(1, argv.data()));
  words = {"tool", "hf_path=x", "help"};
  argv.clear();
  for (std::string& w : words) argv.push_back(w.data());
  EXPECT_FALSE(asks_for_help(3, argv.data()));   // help among keys is a bare word: an error in parse
  EXPECT_NE(error_of([&] { s.parse(3, argv.data()); }).find("argument 'help' is not key=value"), std::string::npos);
}

TEST(ConfigSchema, ToolKeysShareParsingAndErrors) {
  ConfigSchema s = runtime_schema();
  ConfigKey steps{"bench.steps", "bench", ConfigType::Int, 10, "timed steps"};
  s.add(steps.at_least(1));
  EXPECT_EQ(s.parse({}).integer("bench.steps"), 10);
  EXPECT_EQ(s.parse({"bench.steps=3"}).integer("bench.steps"), 3);
  EXPECT_NE(error_of([&] { s.parse({"bench.steps=0"}); }).find("needs bench.steps >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { s.parse({"bench.stesp=4"}); }).find("did you mean 'bench.steps'?"), std::string::npos);
  EXPECT_NE(error_of([&] { s.add(steps); }).find("key 'bench.steps' declared twice"), std::string::npos);
  EXPECT_NE(error_of([&] { s.parse({}).integer("bench.seq_len"); }).find("did not declare"), std::string::npos);
  ConfigKey bad = steps;
  bad.name = "bench.warmup";
  bad.default_value = "two";
  EXPECT_NE(error_of([&] { s.add(bad); }).find("the default of key 'bench.warmup'"), std::string::npos);
}

TEST(ConfigSchema, ToolDefaultsOverrideOnlyTheirKeys) {
  ConfigSchema plain = runtime_schema();
  ConfigSchema tool("bb-tool", "bb-tool [key=value ...]");
  tool.add_runtime_keys();
  tool.override_default("optimizer.lr", 1e-3);
  tool.override_default(
      "backend.dtype",
      [](const RuntimeConfig& c) { return c.backend_cfg.device == "cuda" ? "bfloat16" : "float64"; },
      "float64 on cpu, bfloat16 on cuda");
  const ConfigArgs p = plain.parse({}), t = tool.parse({});
  for (const ConfigKey& k : tool.keys()) {
    if (k.name == "optimizer.lr" || k.name == "backend.dtype") {
      EXPECT_TRUE(k.overridden()) << k.name;
      EXPECT_NE(t.value(k.name), p.value(k.name)) << k.name;
    } else {
      EXPECT_EQ(t.value(k.name), p.value(k.name)) << k.name;
    }
  }
  EXPECT_DOUBLE_EQ(t.runtime.backend_cfg.optimizer.lr, 1e-3);
  EXPECT_EQ(t.runtime.backend_cfg.dtype, "float64");
  // A computed default sees the given keys, and a given value wins over it.
  EXPECT_EQ(tool.parse({"backend.device=cuda"}).runtime.backend_cfg.dtype, "bfloat16");
  EXPECT_EQ(tool.parse({"backend.dtype=float32"}).runtime.backend_cfg.dtype, "float32");
  EXPECT_DOUBLE_EQ(tool.parse({"optimizer.lr=0.5"}).runtime.backend_cfg.optimizer.lr, 0.5);
  EXPECT_NE(error_of([&] { tool.override_default("optimizer.lr", -1.0); }).find("bb-tool's default of key 'optimizer.lr'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tool.override_default("optimizer.learning_rate", 1.0); }).find("no key 'optimizer.learning_rate'"),
            std::string::npos);
  // help shows the tool's default and the schema's.
  const std::string help = tool.help();
  EXPECT_NE(help.find("float64 on cpu, bfloat16 on cuda"), std::string::npos) << help;
  EXPECT_NE(help.find("[bb-tool's default; elsewhere 0.0001]"), std::string::npos) << help;
}

TEST(ConfigSchema, HelpListsEveryKeyWithTypeDefaultAndGroup) {
  const ConfigSchema s = runtime_schema();
  const std::string help = s.help();
  EXPECT_EQ(help.rfind("bb-test hf_path=DIR [key=value ...]\n", 0), 0u) << help;
  for (const char* group : {"\nruntime:\n", "\nbackend:\n", "\nbackend.parallel:\n", "\noptimizer:\n"})
    EXPECT_NE(help.find(group), std::string::npos) << group;
  for (const ConfigKey& k : s.keys()) {
    const size_t at = help.find("  " + k.name + " ");
    ASSERT_NE(at, std::string::npos) << k.name;
    const std::string line = help.substr(at, help.find('\n', at) - at);
    EXPECT_NE(line.find(std::string(" ") + config_type_name(k.type) + " "), std::string::npos) << line;
    EXPECT_NE(line.find(k.doc), std::string::npos) << line;
  }
  EXPECT_NE(help.find("backend.parallel.tp                  int    1 "), std::string::npos) << help;
  EXPECT_NE(help.find("(auto | cudnn | flash)"), std::string::npos) << help;
}

TEST(ConfigSchema, DocsTableMatchesTheSchema) {
  std::ifstream f(BB_SOURCE_DIR "/docs/runtime.md");
  const std::string docs((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_NE(docs.find("## Configuration keys"), std::string::npos);
  const ConfigSchema schema = runtime_schema();
  for (const ConfigKey& k : schema.keys()) {
    std::string def = k.default_value.is_string() ? k.default_value.get<std::string>() : k.default_value.dump();
    if (def.empty()) def = "\"\"";
    std::string doc;  // markdown escapes the table's column separator
    for (char c : k.doc) doc += c == '|' ? std::string("\\|") : std::string(1, c);
    const std::string row = "| `" + k.name + "` | " + config_type_name(k.type) + " | `" + def + "` | " + doc;
    EXPECT_NE(docs.find(row), std::string::npos) << "docs/runtime.md lacks the row " << row;
  }
}

}  // namespace
}  // namespace bb
