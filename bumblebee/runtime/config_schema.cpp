// ConfigSchema: declaring keys, parsing and checking values, applying them onto
// a RuntimeConfig, and the help text.
#include "bumblebee/runtime/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

#include "bumblebee/core/error.h"
#include "bumblebee/runtime/cli_args.h"

namespace bb {

namespace {

using json = nlohmann::json;

constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min(), kInt32Max = std::numeric_limits<int32_t>::max();

const char* type_with_article(ConfigType t) {
  switch (t) {
    case ConfigType::String: return "a string";
    case ConfigType::Int: return "an integer";
    case ConfigType::Float: return "a number";
    case ConfigType::Bool: return "a boolean (true, false, 1 or 0)";
    case ConfigType::Json: return "an object (JSON)";
  }
  return "?";
}

[[noreturn]] void not_of_type(const ConfigKey& k, const std::string& shown_as, const std::string& written) {
  BB_FAIL(shown_as, " must be ", type_with_article(k.type), ", got ", written);
}

void check_int(const ConfigKey& k, int64_t v, const std::string& shown_as, const std::string& written) {
  if (v >= k.int_min && v <= k.int_max) return;
  const bool int32 = k.int_max <= kInt32Max && k.int_min >= kInt32Min;
  BB_CHECK(!int32 || (v >= kInt32Min && v <= kInt32Max), shown_as, ": ", written, " does not fit in a 32-bit integer");
  if (k.int_max == std::numeric_limits<int64_t>::max() || (int32 && k.int_max == kInt32Max))
    BB_FAIL(shown_as, ": ", written, " is out of range (needs ", k.name, " >= ", k.int_min, ")");
  BB_FAIL(shown_as, ": ", written, " is out of range (needs ", k.int_min, " <= ", k.name, " <= ", k.int_max, ")");
}

void check_float(const ConfigKey& k, double v, const std::string& shown_as, const std::string& written) {
  BB_CHECK(std::isfinite(v), shown_as, ": ", written, " is not a finite number");
  const bool low_ok = k.float_min_exclusive ? v > k.float_min : v >= k.float_min;
  if (low_ok && v <= k.float_max) return;
  std::ostringstream range;
  if (std::isinf(k.float_max)) {
    range << "needs " << k.name << (k.float_min_exclusive ? " > " : " >= ") << k.float_min;
  } else {
    range << "needs " << k.float_min << (k.float_min_exclusive ? " < " : " <= ") << k.name << " <= " << k.float_max;
  }
  BB_FAIL(shown_as, ": ", written, " is out of range (", range.str(), ")");
}

void check_choice(const ConfigKey& k, const std::string& v, const std::string& shown_as, const std::string& written) {
  if (k.choices.empty()) return;
  std::string list;
  for (const std::string& c : k.choices) {
    if (v == c) return;
    list += (list.empty() ? "" : ", ") + c;
  }
  BB_FAIL(shown_as, ": ", written, " is not one of: ", list);
}

// Checks `v` (already of the key's JSON kind or convertible) and returns it in canonical form.
json checked(const ConfigKey& k, const json& v, const std::string& shown_as, const std::string& written) {
  switch (k.type) {
    case ConfigType::String:
      if (!v.is_string()) not_of_type(k, shown_as, written);
      check_choice(k, v.get<std::string>(), shown_as, written);
      return v;
    case ConfigType::Int: {
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        BB_FAIL(shown_as, ": ", written, " does not fit in a 64-bit integer");
      int64_t i = 0;
      if (v.is_number_integer()) {
        i = v.get<int64_t>();
      } else if (v.is_number_float() && std::nearbyint(v.get<double>()) == v.get<double>()) {
        BB_CHECK(std::fabs(v.get<double>()) < 9.2e18, shown_as, ": ", written, " does not fit in a 64-bit integer");
        i = int64_t(v.get<double>());
      } else {
        not_of_type(k, shown_as, written);
      }
      check_int(k, i, shown_as, written);
      return json(i);
    }
    case ConfigType::Float:
      if (!v.is_number()) not_of_type(k, shown_as, written);
      check_float(k, v.get<double>(), shown_as, written);
      return json(v.get<double>());
    case ConfigType::Bool:
      if (!v.is_boolean()) not_of_type(k, shown_as, written);
      return v;
    case ConfigType::Json:
      if (!v.is_object()) not_of_type(k, shown_as, written);
      return v;
  }
  not_of_type(k, shown_as, written);
}

std::string shown_default(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string padded(std::string s, size_t width) {
  if (s.size() < width) s.resize(width, ' ');
  return s;
}

}  // namespace

const char* config_type_name(ConfigType t) {
  switch (t) {
    case ConfigType::String: return "string";
    case ConfigType::Int: return "int";
    case ConfigType::Float: return "float";
    case ConfigType::Bool: return "bool";
    case ConfigType::Json: return "json";
  }
  return "?";
}

ConfigKey& ConfigKey::one_of(std::vector<std::string> values) {
  choices = std::move(values);
  return *this;
}

ConfigKey& ConfigKey::in_range(int64_t min, int64_t max) {
  int_min = min;
  int_max = max;
  return *this;
}

ConfigKey& ConfigKey::at_least(int64_t min) {
  int_min = min;
  return *this;
}

ConfigKey& ConfigKey::in_float_range(double min, double max) {
  float_min = min;
  float_max = max;
  return *this;
}

ConfigKey& ConfigKey::above(double min) {
  float_min = min;
  float_min_exclusive = true;
  return *this;
}

json parse_config_value(const ConfigKey& k, const std::string& text, const std::string& shown) {
  const std::string shown_as = shown.empty() ? "key '" + k.name + "'" : shown;
  const std::string written = "'" + text + "'";
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  switch (k.type) {
    case ConfigType::String:
      return checked(k, json(text), shown_as, written);
    case ConfigType::Int: {
      int64_t v = 0;
      auto [stop, ec] = std::from_chars(begin, end, v);
      BB_CHECK(ec != std::errc::result_out_of_range, shown_as, ": ", written, " does not fit in a 64-bit integer");
      if (ec != std::errc() || stop != end) not_of_type(k, shown_as, written);
      return checked(k, json(v), shown_as, written);
    }
    case ConfigType::Float: {
      double v = 0;
      auto [stop, ec] = std::from_chars(begin, end, v);
      BB_CHECK(ec != std::errc::result_out_of_range, shown_as, ": ", written, " is out of the range of a double");
      if (ec != std::errc() || stop != end) not_of_type(k, shown_as, written);
      return checked(k, json(v), shown_as, written);
    }
    case ConfigType::Bool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      not_of_type(k, shown_as, written);
    case ConfigType::Json: {
      json v;
      try {
        v = json::parse(text);
      } catch (const json::exception& e) {
        BB_FAIL(shown_as, ": ", written, " is not valid JSON (", e.what(), ")");
      }
      return checked(k, v, shown_as, written);
    }
  }
  not_of_type(k, shown_as, written);
}

json check_config_value(const ConfigKey& k, const json& v, const std::string& shown_as) {
  if (v.is_null() && k.default_value.is_null()) return v;   // a key whose default is "unset"
  return checked(k, v, shown_as, v.dump());
}

std::string config_key_doc(const ConfigKey& k) {
  if (k.choices.empty()) return k.doc;
  std::string list;
  for (const std::string& c : k.choices) list += (list.empty() ? "" : " | ") + c;
  return k.doc + " (" + list + ")";
}

bool asks_for_help(int argc, char** argv, size_t first) {
  if (argc < 0 || size_t(argc) != first + 1) return false;
  const std::string word = argv[first];
  return word == "help" || word == "--help" || word == "-h";
}

bool ConfigArgs::has(const std::string& key) const {
  BB_CHECK(values_.count(key), "ConfigArgs: the tool reads key '", key, "' but did not declare it");
  return given_.count(key) > 0;
}

const json& ConfigArgs::value(const std::string& key) const {
  auto it = values_.find(key);
  BB_CHECK(it != values_.end(), "ConfigArgs: the tool reads key '", key, "' but did not declare it");
  return it->second;
}

std::string ConfigArgs::str(const std::string& key) const { return value(key).get<std::string>(); }
int64_t ConfigArgs::integer(const std::string& key) const { return value(key).get<int64_t>(); }
double ConfigArgs::number(const std::string& key) const { return value(key).get<double>(); }
bool ConfigArgs::flag(const std::string& key) const { return value(key).get<bool>(); }

ConfigSchema::ConfigSchema(std::string tool, std::string usage) : tool_(std::move(tool)), usage_(std::move(usage)) {}

void ConfigSchema::add(ConfigKey key) {
  BB_CHECK(!key.name.empty(), "ConfigSchema: a key needs a name");
  BB_CHECK(!find(key.name), "ConfigSchema: key '", key.name, "' declared twice");
  // A null default means "unset": the setter receives null unless the key is given.
  if (!key.default_value.is_null())
    key.default_value = check_config_value(key, key.default_value, "the default of key '" + key.name + "'");
  keys_.push_back(std::move(key));
}

const ConfigKey* ConfigSchema::find(const std::string& name) const {
  for (const ConfigKey& k : keys_)
    if (k.name == name) return &k;
  return nullptr;
}

const ConfigKey& ConfigSchema::at(const std::string& name) const {
  const ConfigKey* k = find(name);
  BB_CHECK(k, "ConfigSchema: no key '", name, "'");
  return *k;
}

ConfigKey& ConfigSchema::mutable_key(const std::string& name) {
  for (ConfigKey& k : keys_)
    if (k.name == name) return k;
  BB_FAIL("ConfigSchema: no key '", name, "'");
}

void ConfigSchema::override_default(const std::string& name, json value) {
  ConfigKey& k = mutable_key(name);
  k.tool_default = check_config_value(k, value, tool_ + "'s default of key '" + name + "'");
}

void ConfigSchema::override_default(const std::string& name, std::function<json(const RuntimeConfig&)> computed,
                                    std::string doc) {
  ConfigKey& k = mutable_key(name);
  k.computed_default = std::move(computed);
  k.computed_default_doc = std::move(doc);
}

ConfigArgs ConfigSchema::parse(int argc, char** argv, size_t first) const {
  std::vector<std::string> words;
  for (size_t i = first; i < size_t(std::max(argc, 0)); ++i) words.emplace_back(argv[i]);
  return parse(words);
}

ConfigArgs ConfigSchema::parse(const std::vector<std::string>& words) const {
  std::set<std::string> known;
  for (const ConfigKey& k : keys_) known.insert(k.name);
  ConfigArgs out;
  auto assign = [&](const ConfigKey& k, const json& v) {
    out.values_[k.name] = v;
    if (k.set) k.set(out.runtime, v);
  };
  for (const ConfigKey& k : keys_) assign(k, k.tool_default.value_or(k.default_value));
  for (const KeyValue& kv : parse_key_values(words, known, tool_)) {
    assign(at(kv.key), parse_config_value(at(kv.key), kv.value));
    out.given_.insert(kv.key);
  }
  // Computed defaults see every given key.
  for (const ConfigKey& k : keys_)
    if (k.computed_default && !out.given_.count(k.name))
      assign(k, check_config_value(k, k.computed_default(out.runtime), tool_ + "'s default of key '" + k.name + "'"));
  return out;
}

std::string ConfigSchema::help() const {
  std::string out = usage_ + "\n\nkeys (type, default, meaning), by group:\n";
  std::vector<std::string> groups;
  for (const ConfigKey& k : keys_)
    if (std::find(groups.begin(), groups.end(), k.group) == groups.end()) groups.push_back(k.group);
  for (const std::string& group : groups) {
    out += "\n" + group + ":\n";
    for (const ConfigKey& k : keys_) {
      if (k.group != group) continue;
      std::string def = k.computed_default ? k.computed_default_doc
                                           : shown_default(k.tool_default.value_or(k.default_value));
      std::string doc = config_key_doc(k);
      if (k.overridden()) doc += " [" + tool_ + "'s default; elsewhere " + shown_default(k.default_value) + "]";
      if (def.empty()) def = "\"\"";
      out += "  " + padded(k.name, 36) + " " + padded(config_type_name(k.type), 6) + " " + padded(def, 12) + " " + doc +
             "\n";
    }
  }
  return out;
}

}  // namespace bb
