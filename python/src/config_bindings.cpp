// The configuration schema for Python: every runtime key with its type,
// default and doc (the Python dataclasses are made from them), and parsing of
// key=value words, so Python configs get the tools' checks and errors.
// Values cross as JSON text; the Python side reads it with json.loads.
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bumblebee/runtime/config_schema.h"
#include "python/src/bindings.h"
#include "python/src/runtime_schema.h"

namespace nb = nanobind;

namespace bb::python {

const ConfigSchema& runtime_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s("bumblebee", "bumblebee.RuntimeConfig fields, or key=value overrides");
    s.add_runtime_keys();
    return s;
  }();
  return schema;
}

RuntimeConfig parse_runtime_config(const std::vector<std::string>& words) { return runtime_schema().parse(words).runtime; }

void bind_config(nb::module_& m) {
  m.def(
      "schema_keys",
      [] {
        nlohmann::json keys = nlohmann::json::array();
        for (const ConfigKey& k : runtime_schema().keys())
          keys.push_back({{"name", k.name}, {"group", k.group}, {"type", config_type_name(k.type)},
                          {"default", k.default_value}, {"doc", config_key_doc(k)}, {"choices", k.choices}});
        return keys.dump();
      },
      "Every runtime key as JSON: name, group, type, default, doc, choices.");
  m.def(
      "parse_config",
      [](const std::vector<std::string>& words) {
        const ConfigArgs args = runtime_schema().parse(words);
        nlohmann::json given = nlohmann::json::object();
        for (const ConfigKey& k : runtime_schema().keys())
          if (args.has(k.name)) given[k.name] = args.value(k.name);
        return given.dump();
      },
      nb::arg("words"), "Parses and checks key=value words; returns the given keys' typed values as JSON.");
  m.def("config_help", [] { return runtime_schema().help(); }, "Every key with type, default and meaning.");
}

}  // namespace bb::python
