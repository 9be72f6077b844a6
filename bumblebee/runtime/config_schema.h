// ConfigSchema: every key=value key of our tools, declared once with its
// dotted name, type, default, one line of doc and a typed setter into
// RuntimeConfig.
//
//   ConfigSchema schema("bb-bench", "bb-bench hf_path=DIR [key=value ...]");
//   schema.add_runtime_keys();                           // backend, hf_path, backend.*, optimizer.*
//   schema.add(ConfigKey{"bench.steps", "bench", ConfigType::Int, 10, "timed steps"}.at_least(1));
//   schema.override_default("optimizer.lr", 1e-3);       // shown by `help`
//   if (asks_for_help(argc, argv)) { print(schema.help()); return 0; }
//   ConfigArgs args = schema.parse(argc, argv);          // args.runtime, args.integer("bench.steps")
//
// The runtime keys are the seed library's names (backend.parallel.tp,
// optimizer.lr, ...). A tool adds its own keys to the same object, so they get
// the same parsing, errors, suggestions and help. Every value is checked when
// it is parsed: a malformed or out-of-range value is a bb::Error naming the key
// and the value as written ("key 'backend.parallel.tp': '99999999999' does not
// fit in a 32-bit integer"); no float key takes a non-finite value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bumblebee/runtime/config.h"

namespace bb {

enum class ConfigType { String, Int, Float, Bool, Json };   // Json: a JSON object

const char* config_type_name(ConfigType t);   // "string", "int", "float", "bool", "json"

struct ConfigKey {
  std::string name;    // dotted, as written on the command line: "backend.parallel.tp"
  std::string group;   // the heading `help` lists it under
  ConfigType type = ConfigType::String;
  nlohmann::json default_value;   // the schema's default; null: unset unless given
  std::string doc;                // one line

  std::vector<std::string> choices;   // String: the allowed values (empty: any)
  int64_t int_min = std::numeric_limits<int64_t>::min(), int_max = std::numeric_limits<int64_t>::max();
  double float_min = -std::numeric_limits<double>::infinity(), float_max = std::numeric_limits<double>::infinity();
  bool float_min_exclusive = false;

  // Writes a checked value into the runtime config; empty for a tool's own keys.
  std::function<void(RuntimeConfig&, const nlohmann::json&)> set;

  // A tool's own default (ConfigSchema::override_default): a value, or one
  // computed from the config once every given key is applied.
  std::optional<nlohmann::json> tool_default;
  std::function<nlohmann::json(const RuntimeConfig&)> computed_default;
  std::string computed_default_doc;   // how `help` shows the computed default

  ConfigKey& one_of(std::vector<std::string> values);
  ConfigKey& in_range(int64_t min, int64_t max);   // Int
  ConfigKey& at_least(int64_t min);                // Int
  ConfigKey& in_float_range(double min, double max);   // Float, inclusive
  ConfigKey& above(double min);                    // Float, exclusive
  bool overridden() const { return tool_default.has_value() || bool(computed_default); }
};

// The parsed command line: the runtime config and every key's typed value.
class ConfigArgs {
 public:
  RuntimeConfig runtime;

  bool has(const std::string& key) const;   // given on the command line (not a default)
  const nlohmann::json& value(const std::string& key) const;   // given or default
  std::string str(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool flag(const std::string& key) const;

 private:
  friend class ConfigSchema;
  std::map<std::string, nlohmann::json> values_;
  std::set<std::string> given_;
};

class ConfigSchema {
 public:
  // `tool` names the program in errors and help; `usage` is help's first line.
  ConfigSchema(std::string tool, std::string usage);

  // RuntimeConfig, BBConfig, ParallelConfig and OptimizerConfig, one key per field.
  void add_runtime_keys();
  void add(ConfigKey key);   // a name declared twice is a bb::Error
  void override_default(const std::string& name, nlohmann::json value);
  void override_default(const std::string& name, std::function<nlohmann::json(const RuntimeConfig&)> computed,
                        std::string doc);

  const std::string& tool() const { return tool_; }
  const std::vector<ConfigKey>& keys() const { return keys_; }
  const ConfigKey* find(const std::string& name) const;
  const ConfigKey& at(const std::string& name) const;   // a bb::Error for an unknown name

  // The words argv[first..argc): key=value each, parsed, checked and applied
  // over the defaults (the tool's where it overrides them).
  ConfigArgs parse(int argc, char** argv, size_t first = 1) const;
  ConfigArgs parse(const std::vector<std::string>& words) const;

  // Every key with type, default and doc, grouped, after the usage line.
  std::string help() const;

 private:
  ConfigKey& mutable_key(const std::string& name);

  std::string tool_, usage_;
  std::vector<ConfigKey> keys_;
};

// The value of `text` as `key`'s type, checked; errors name the key (or
// `shown_as`, when given) and the text as written.
nlohmann::json parse_config_value(const ConfigKey& key, const std::string& text, const std::string& shown_as = "");

// Checks a typed value (from a command line or a recipe file) against the key's
// type, range and choices. `shown_as` names the key and where it came from in errors.
nlohmann::json check_config_value(const ConfigKey& key, const nlohmann::json& value, const std::string& shown_as);

// The key's doc line with its choices, as `help` shows it.
std::string config_key_doc(const ConfigKey& key);

// True when the words after argv[first - 1] are exactly `help` (or --help, -h).
bool asks_for_help(int argc, char** argv, size_t first = 1);

}  // namespace bb
