// Typed, validated access to the keys of one JSON object, for the model, cluster and plan readers.
// Each reader asks for the keys it needs; the first problem (missing key, wrong type, value out of
// range) is remembered as one line naming the file and key, and later calls are no-ops. The reader
// checks ok() once at the end, so parsing code stays a flat list of fields.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "models/status.h"

namespace parallax {

// Reads and parses a JSON file; errors name the file and, for syntax errors, the position.
Result<nlohmann::json> read_json_file(const std::string& path);

// The string at `key`, or "" when `object` is no object, lacks the key or holds another type there:
// for identity checks ("is this Parallax's file?"), where anything but the expected string simply
// does not match. nlohmann's value(key, "") throws on a present key of another type.
std::string string_or_empty(const nlohmann::json& object, const char* key);

class JsonFields {
 public:
  // `where` prefixes every message, e.g. "models/13b.json" or "plan.json: network".
  JsonFields(const nlohmann::json& object, std::string where);

  bool has(const char* key) const;
  // Integers must be whole JSON numbers >= min.
  int64_t required_int(const char* key, int64_t min = 1);
  std::optional<int64_t> optional_int(const char* key, int64_t min = 1);
  // Numbers must be finite and > 0 unless allow_zero.
  double required_number(const char* key, bool allow_zero = false);
  std::optional<double> optional_number(const char* key, bool allow_zero = false);
  std::string required_string(const char* key);
  // A bandwidth in gigaBYTES per second: a number (GB/s, the `_gbps` convention), or a string
  // with its unit — "400 Gb/s" or "400 Gbit/s" (bits: 50), "50 GB/s", "3.35 TB/s" — so that a
  // NIC's marketing figure is never read as bytes.
  double required_bandwidth_gbps(const char* key);
  std::optional<std::string> optional_string(const char* key);
  bool optional_bool(const char* key, bool if_absent);
  // A nested object; on error returns an empty object and records the problem.
  const nlohmann::json& required_object(const char* key);

  // After every key has been asked for: the first key of the object that was not (nor is in
  // `also_known`) is an error, so a misspelt key is never read as its default. The plan and cluster
  // readers call it; a Hugging Face config has keys Parallax does not use and does not.
  void reject_unknown_keys(std::initializer_list<const char*> also_known = {});

  // Records a problem found by the caller (e.g. a cross-field constraint).
  void fail(const std::string& key, const std::string& problem);

  // Of `keys`, the first present with a value that switches something on (true, a non-zero
  // number, a non-empty string, array or object) that no reader has asked for; "" if none. The
  // model reader refuses such a key rather than pricing the model without it.
  std::string first_unread_set(std::initializer_list<const char*> keys) const;

  const nlohmann::json& object() const { return object_; }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* find(const char* key) const;

  const nlohmann::json& object_;
  std::string where_;
  std::string error_;
  mutable std::set<std::string> known_;  // keys asked for
};

}  // namespace parallax
