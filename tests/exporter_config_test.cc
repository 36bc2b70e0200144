#include <gtest/gtest.h>

#include "config.h"

namespace gym::exporter {
namespace {

bool has_error(const ConfigResult& r, const std::string& needle) {
  for (const auto& e : r.errors)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

TEST(ExporterConfig, DefaultsWhenTheFileSetsNothing) {
  ConfigResult r = parse_config("", "empty.yml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config.listen_address, ":9478");
  EXPECT_EQ(r.config.telemetry_path, "/metrics");
  EXPECT_EQ(r.config.registry_dir, "/dev/shm/gym-metrics");
}

TEST(ExporterConfig, ReadsEveryKey) {
  ConfigResult r = parse_config(
      "web:\n  listen_address: 127.0.0.1:9999\n  telemetry_path: /m\n  max_connections: 3\n"
      "registry:\n  dir: /tmp/r\nlog:\n  level: debug\n  format: json\n",
      "full.yml");
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_EQ(r.config.listen_address, "127.0.0.1:9999");
  EXPECT_EQ(r.config.telemetry_path, "/m");
  EXPECT_EQ(r.config.max_connections, 3);
  EXPECT_EQ(r.config.registry_dir, "/tmp/r");
  EXPECT_EQ(r.config.log_level, "debug");
  EXPECT_EQ(r.config.log_format, "json");
}

TEST(ExporterConfig, UnknownKeyNamesFileLineAndColumn) {
  ConfigResult r = parse_config("web:\n  listen_address: :1\n  listen_adress: :2\n", "g.yml");
  EXPECT_TRUE(has_error(r, "g.yml:3:3: unknown key 'web.listen_adress'")) << r.errors.at(0);
}

TEST(ExporterConfig, WrongTypeNamesFileLineAndColumn) {
  ConfigResult r = parse_config("web:\n  max_connections: many\n", "g.yml");
  EXPECT_TRUE(has_error(r, "g.yml:2:20: web.max_connections must be an integer")) << r.errors.at(0);
  r = parse_config("registry:\n  dir: [a, b]\n", "g.yml");
  EXPECT_TRUE(has_error(r, "g.yml:2:8: registry.dir must be a string")) << r.errors.at(0);
  r = parse_config("- a\n- b\n", "g.yml");
  EXPECT_TRUE(has_error(r, "g.yml:1:1: the file must be a mapping")) << r.errors.at(0);
}

TEST(ExporterConfig, BadValuesAreErrors) {
  EXPECT_TRUE(has_error(parse_config("log:\n  level: loud\n", "g.yml"), "log level"));
  EXPECT_TRUE(has_error(parse_config("log:\n  format: xml\n", "g.yml"), "log format"));
  EXPECT_TRUE(has_error(parse_config("web:\n  telemetry_path: metrics\n", "g.yml"), "telemetry"));
  EXPECT_TRUE(has_error(parse_config("web:\n  listen_address: nope\n", "g.yml"), "listen"));
  EXPECT_TRUE(has_error(parse_config("web:\n  listen_address: :99999\n", "g.yml"), "listen"));
  EXPECT_TRUE(has_error(parse_config("web:\n  max_connections: 0\n", "g.yml"), "between"));
}

TEST(ExporterConfig, InvalidYamlNamesWhere) {
  ConfigResult r = parse_config("web: [unclosed\n", "g.yml");
  EXPECT_TRUE(has_error(r, "g.yml:")) << r.errors.at(0);
  EXPECT_TRUE(has_error(r, "invalid YAML"));
}

TEST(ExporterConfig, MissingFileIsAnError) {
  EXPECT_TRUE(has_error(load_config_file("/nonexistent/gym.yml"), "cannot read"));
}

TEST(ExporterConfig, FlagsOverrideTheFile) {
  ConfigResult r = parse_config("registry:\n  dir: /a\nlog:\n  level: debug\n", "g.yml");
  ConfigOverrides o;
  o.registry_dir = "/b";
  o.apply(r.config);
  EXPECT_EQ(r.config.registry_dir, "/b");
  EXPECT_EQ(r.config.log_level, "debug");
}

}  // namespace
}  // namespace gym::exporter
