#include "models/json_fields.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace parallax {
namespace {

// ctest runs each test in its own process, in parallel: one file per test.
std::string write_temp(const std::string& text) {
  std::string path = testing::TempDir() + "/json_fields_" +
                     testing::UnitTest::GetInstance()->current_test_info()->name() + ".json";
  std::ofstream(path) << text;
  return path;
}

TEST(ReadJsonFile, MalformedJsonNamesFileAndPosition) {
  const std::string path = write_temp("{\"a\": 1,,}");
  Result<nlohmann::json> j = read_json_file(path);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().rfind(path + ": malformed JSON: parse error", 0), 0u) << j.error();
  EXPECT_NE(j.error().find("line 1"), std::string::npos) << j.error();
}

TEST(ReadJsonFile, NumberOutOfRangeIsAnError) {
  Result<nlohmann::json> j = read_json_file(write_temp("{\"a\": 1e400}"));
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().find("malformed JSON"), std::string::npos) << j.error();
}

TEST(ReadJsonFile, TopLevelMustBeAnObject) {
  Result<nlohmann::json> j = read_json_file(write_temp("[1, 2]"));
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().find("expected a JSON object"), std::string::npos);
}

TEST(JsonFields, FirstErrorWinsAndLaterCallsAreNoOps) {
  const nlohmann::json j = {{"a", 0}, {"b", "x"}, {"c", 2.5}, {"d", true}};
  JsonFields f(j, "f.json");
  EXPECT_EQ(f.required_int("a", 0), 0);
  EXPECT_TRUE(f.ok());
  (void)f.required_int("a");  // min 1
  EXPECT_EQ(f.error(), "f.json: key 'a': must be >= 1, got 0");
  (void)f.required_int("missing");
  EXPECT_EQ(f.error(), "f.json: key 'a': must be >= 1, got 0");
}

TEST(JsonFields, TypesAndRanges) {
  const nlohmann::json j = {{"n", 2.5}, {"i", 4.0}, {"neg", -1.0}, {"s", 3}, {"b", "yes"}};
  {
    JsonFields f(j, "w");
    EXPECT_EQ(f.required_int("i"), 4);  // 4.0 is a whole number
    EXPECT_DOUBLE_EQ(f.required_number("n"), 2.5);
    EXPECT_TRUE(f.ok());
  }
  auto fails = [&](auto call, const std::string& expected) {
    JsonFields f(j, "w");
    call(f);
    EXPECT_EQ(f.error(), expected);
  };
  fails([](JsonFields& f) { (void)f.required_int("n"); }, "w: key 'n': expected an integer, got 2.5");
  fails([](JsonFields& f) { (void)f.required_number("neg"); }, "w: key 'neg': must be > 0, got -1.0");
  fails([](JsonFields& f) { (void)f.required_string("s"); }, "w: key 's': expected a string, got 3");
  fails([](JsonFields& f) { (void)f.optional_bool("b", false); }, "w: key 'b': expected true or false, got \"yes\"");
  fails([](JsonFields& f) { (void)f.required_object("s"); }, "w: key 's': expected an object, got 3");
}

// Keys that switch something on and were never asked for: false, 0, "", [], {} and null switch
// nothing on; a key asked for (even only through has()) is not reported.
TEST(JsonFields, FirstUnreadSetKey) {
  const nlohmann::json j = nlohmann::json::parse(
      R"({"off":false,"zero":0,"empty":"","none":[],"null":null,"asked":8,"experts":8,"bias":true})");
  JsonFields f(j, "w");
  EXPECT_TRUE(f.has("asked"));
  EXPECT_EQ(f.first_unread_set({"off", "zero", "empty", "none", "null", "asked", "missing"}), "");
  EXPECT_EQ(f.first_unread_set({"off", "experts", "bias"}), "experts");
  EXPECT_TRUE(f.ok());  // reporting is the caller's: the model reader fails with the key's name
}

}  // namespace
}  // namespace parallax
