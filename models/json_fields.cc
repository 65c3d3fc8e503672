#include "models/json_fields.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace parallax {

namespace {
const nlohmann::json& empty_object() {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  return kEmpty;
}

std::string describe(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}
}  // namespace

Result<nlohmann::json> read_json_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return Error{path + ": is a directory, not a JSON file"};
  std::ifstream in(path);
  if (!in) return Error{path + ": cannot open file"};
  std::stringstream buffer;
  buffer << in.rdbuf();
  // nlohmann reports syntax errors as exceptions; they stop here and become values.
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {  // syntax errors, and numbers out of range
    std::string what = e.what();
    auto pos = what.find("parse error");
    return Error{path + ": malformed JSON: " + (pos == std::string::npos ? what : what.substr(pos))};
  }
  if (!parsed.is_object()) return Error{path + ": expected a JSON object at the top level"};
  return parsed;
}

std::string string_or_empty(const nlohmann::json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

JsonFields::JsonFields(const nlohmann::json& object, std::string where)
    : object_(object.is_object() ? object : empty_object()), where_(std::move(where)) {
  if (!object.is_object()) error_ = where_ + ": expected a JSON object";
}

const nlohmann::json* JsonFields::find(const char* key) const {
  known_.insert(key);
  auto it = object_.find(key);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(const char* key) const { return find(key) != nullptr; }

void JsonFields::reject_unknown_keys(std::initializer_list<const char*> also_known) {
  known_.insert(also_known.begin(), also_known.end());
  for (const auto& [key, value] : object_.items())
    if (!known_.count(key)) return fail(key, "is not a key of this section (misspelt?)");
}

std::string JsonFields::first_unread_set(std::initializer_list<const char*> keys) const {
  for (const char* key : keys) {
    auto it = object_.find(key);
    if (it == object_.end() || known_.count(key)) continue;
    const nlohmann::json& v = *it;
    const bool set = v.is_boolean() ? v.get<bool>()
                     : v.is_number() ? v.get<double>() != 0.0
                     : v.is_string()                  ? !v.get<std::string>().empty()
                     : v.is_array() || v.is_object()  ? !v.empty()
                                                      : false;
    if (set) return key;
  }
  return "";
}

void JsonFields::fail(const std::string& key, const std::string& problem) {
  if (!error_.empty()) return;
  error_ = where_ + ": key '" + key + "': " + problem;
}

std::optional<int64_t> JsonFields::optional_int(const char* key, int64_t min) {
  const nlohmann::json* v = find(key);
  if (!v || !ok()) return std::nullopt;
  bool integral = v->is_number_integer() ||
                  (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
                   std::abs(v->get<double>()) < 9.0e15);
  if (!integral) {
    fail(key, "expected an integer, got " + describe(*v));
    return std::nullopt;
  }
  int64_t value = v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail(key, "integer out of range");
    return std::nullopt;
  }
  if (value < min) {
    fail(key, "must be >= " + std::to_string(min) + ", got " + std::to_string(value));
    return std::nullopt;
  }
  return value;
}

int64_t JsonFields::required_int(const char* key, int64_t min) {
  if (!ok()) return min;
  if (!has(key)) {
    fail(key, "missing required key");
    return min;
  }
  return optional_int(key, min).value_or(min);
}

std::optional<double> JsonFields::optional_number(const char* key, bool allow_zero) {
  const nlohmann::json* v = find(key);
  if (!v || !ok()) return std::nullopt;
  if (!v->is_number()) {
    fail(key, "expected a number, got " + describe(*v));
    return std::nullopt;
  }
  double value = v->get<double>();
  if (!std::isfinite(value) || value < 0 || (!allow_zero && value == 0)) {
    fail(key, std::string("must be ") + (allow_zero ? ">= 0" : "> 0") + ", got " + describe(*v));
    return std::nullopt;
  }
  return value;
}

double JsonFields::required_number(const char* key, bool allow_zero) {
  if (!ok()) return 1;
  if (!has(key)) {
    fail(key, "missing required key");
    return 1;
  }
  return optional_number(key, allow_zero).value_or(1);
}

std::optional<std::string> JsonFields::optional_string(const char* key) {
  const nlohmann::json* v = find(key);
  if (!v || !ok()) return std::nullopt;
  if (!v->is_string()) {
    fail(key, "expected a string, got " + describe(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

double JsonFields::required_bandwidth_gbps(const char* key) {
  const nlohmann::json* v = find(key);
  if (!v || v->is_number()) return required_number(key);
  if (!ok()) return 0;
  if (!v->is_string()) {
    fail(key, "expected GB/s as a number, or a string such as \"400 Gb/s\" or \"50 GB/s\", got " + describe(*v));
    return 0;
  }
  const std::string text = v->get<std::string>();
  std::istringstream in(text);
  double value = 0;
  std::string unit;
  in >> value >> unit;
  const std::pair<const char*, double> units[] = {{"Gb/s", 1.0 / 8}, {"Gbit/s", 1.0 / 8}, {"GB/s", 1.0},
                                                  {"Tb/s", 1000.0 / 8}, {"TB/s", 1000.0}};
  for (const auto& [name, scale] : units)
    if (!in.fail() && unit == name && in.peek() == std::char_traits<char>::eof() && value > 0 && std::isfinite(value))
      return value * scale;
  fail(key, "cannot read bandwidth \"" + text + "\" (a number of GB/s, or N Gb/s, Gbit/s, GB/s, Tb/s, TB/s)");
  return 0;
}

std::string JsonFields::required_string(const char* key) {
  if (!ok()) return {};
  if (!has(key)) {
    fail(key, "missing required key");
    return {};
  }
  return optional_string(key).value_or("");
}

bool JsonFields::optional_bool(const char* key, bool if_absent) {
  const nlohmann::json* v = find(key);
  if (!v || !ok()) return if_absent;
  if (!v->is_boolean()) {
    fail(key, "expected true or false, got " + describe(*v));
    return if_absent;
  }
  return v->get<bool>();
}

const nlohmann::json& JsonFields::required_object(const char* key) {
  const nlohmann::json* v = find(key);
  if (!ok()) return empty_object();
  if (!v) {
    fail(key, "missing required key");
    return empty_object();
  }
  if (!v->is_object()) {
    fail(key, "expected an object, got " + describe(*v));
    return empty_object();
  }
  return *v;
}

}  // namespace parallax
