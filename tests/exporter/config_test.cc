#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "collectors/memory.h"
#include "config.h"
#include "sd_file.h"
#include "test_support.h"
#include "web_config.h"

namespace gym::exporter {
namespace {

// The memory: section as the memory collector reads it.
MemoryConfig memory_of(const Config& c) {
  return collector_settings<MemorySettings>(c, "memory").config();
}

// A stand-in for bcrypt that counts its calls: "pw" matches hash "h1" and
// "pw2" matches "h2".
int g_verifications = 0;
bool counting_verify(const std::string& password, const std::string& hash) {
  ++g_verifications;
  return (password == "pw" && hash == "h1") || (password == "pw2" && hash == "h2");
}

TEST(PasswordCache, ChecksEachCredentialOnceAndAgainWhenTheHashChanges) {
  g_verifications = 0;
  PasswordCache cache(&counting_verify);
  EXPECT_TRUE(cache.check("alice", "pw", "h1"));
  EXPECT_TRUE(cache.check("alice", "pw", "h1"));
  EXPECT_EQ(g_verifications, 1) << "the second request costs no bcrypt";
  EXPECT_FALSE(cache.check("alice", "wrong", "h1"));
  EXPECT_FALSE(cache.check("alice", "wrong", "h1"));
  EXPECT_EQ(g_verifications, 2) << "a wrong password is remembered as wrong";
  EXPECT_FALSE(cache.check("alice", "pw", "h2")) << "a reload changed the hash";
  EXPECT_TRUE(cache.check("alice", "pw2", "h2"));
  EXPECT_FALSE(cache.check("bob", "pw", "h2")) << "another user, another key";
  EXPECT_EQ(g_verifications, 5);
}

TEST(PasswordCache, GuessingCannotGrowItBeyondItsBound) {
  g_verifications = 0;
  PasswordCache cache(&counting_verify);
  EXPECT_TRUE(cache.check("alice", "pw", "h1"));
  for (size_t i = 0; i < PasswordCache::kEntries; ++i)
    EXPECT_FALSE(cache.check("alice", "guess" + std::to_string(i), "h1"));
  // Full: emptied, so the good credential is checked again (and still holds).
  EXPECT_TRUE(cache.check("alice", "pw", "h1"));
  EXPECT_EQ(g_verifications, int(PasswordCache::kEntries) + 2);
}

bool has_error(const ConfigResult& r, const std::string& needle) {
  for (const auto& e : r.errors)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

TEST(ExporterConfig, DefaultsWhenTheFileSetsNothing) {
  ConfigResult r = parse_config("", "empty.yml");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config.listen_addresses, std::vector<std::string>{":9478"});
  EXPECT_FALSE(r.config.systemd_socket);
  EXPECT_EQ(r.config.unix_socket_mode, 0660);
  EXPECT_EQ(r.config.final_capture_dir, "");
  EXPECT_EQ(r.config.telemetry_path, "/metrics");
  EXPECT_EQ(r.config.registry_dir, "/dev/shm/gym-metrics");
  // RSS and PSS at every 5 s sample (docs/memory.md says what it costs).
  EXPECT_EQ(memory_of(r.config).interval_seconds, 5);
  EXPECT_EQ(memory_of(r.config).pss_interval_seconds, 0);
}

TEST(ExporterConfig, KeyOverridesAreSetOverTheFileAndParsedWithItOnce) {
  gym::testing::TempDir tmp;
  const std::string path = tmp.path() + "/c.yml";
  std::ofstream(path) << "servers:\n  proc_root: /from-file\ngpu:\n  interval_seconds: 7\n";
  const KeyOverrides keys = {{"servers", "proc_root", "/from-flag"},
                             {"gpu", "library", "/lib/fake-nvml.so"},
                             {"memory", "interval_seconds", "9"}};
  ConfigResult r = load_config_file(path, keys);
  ASSERT_TRUE(r.ok()) << r.errors.front();
  EXPECT_EQ(r.config.servers.proc_root, "/from-flag") << "the flag wins over the file";
  const std::string gpu = r.config.collectors.at("gpu").yaml;
  EXPECT_NE(gpu.find("/lib/fake-nvml.so"), std::string::npos) << gpu;
  EXPECT_NE(gpu.find("interval_seconds: 7"), std::string::npos) << "the file's other keys stay";
  EXPECT_EQ(memory_of(r.config).interval_seconds, 9) << "a section the file lacks is made";
  ConfigResult none = parse_config("", "gym-stat", keys);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.config.servers.proc_root, "/from-flag");
}

TEST(ExporterConfig, KeyOverridesKeepTheFilesErrorsWhereTheyAre) {
  // A bad key still names its line and column; a section that is not a
  // mapping is left for the parser to refuse; a bad overriding value is an
  // error like the file's.
  ConfigResult r =
      parse_config("log:\n  level: info\n  bogus: 1\n", "c.yml", {{"servers", "proc_root", "/p"}});
  EXPECT_TRUE(has_error(r, "c.yml:3:3")) << (r.errors.empty() ? "" : r.errors.front());
  ConfigResult scalar = parse_config("servers: 3\n", "c.yml", {{"servers", "proc_root", "/p"}});
  EXPECT_FALSE(scalar.ok());
  ConfigResult bad = parse_config("", "c.yml", {{"memory", "interval_seconds", "soon"}});
  EXPECT_TRUE(has_error(bad, "memory.interval_seconds"))
      << (bad.errors.empty() ? "" : bad.errors.front());
}

TEST(ExporterConfig, ReadsEveryKey) {
  ConfigResult r = parse_config(
      "web:\n  listen_address: 127.0.0.1:9999\n  telemetry_path: /m\n  max_connections: 3\n"
      "registry:\n  dir: /tmp/r\nlog:\n  level: debug\n  format: json\n",
      "full.yml");
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_EQ(r.config.listen_addresses, std::vector<std::string>{"127.0.0.1:9999"});
  EXPECT_EQ(r.config.telemetry_path, "/m");
  EXPECT_EQ(r.config.max_connections, 3);
  EXPECT_EQ(r.config.registry_dir, "/tmp/r");
  EXPECT_EQ(r.config.log_level, "debug");
  EXPECT_EQ(r.config.log_format, "json");
}

TEST(ExporterConfig, RegistryBoundsAreReadAndCheckedAndHaveDefaults) {
  EXPECT_EQ(parse_config("", "e.yml").config.retired_series_ttl_seconds, 3600);
  EXPECT_EQ(parse_config("", "e.yml").config.max_series, 100000);
  ConfigResult r =
      parse_config("registry:\n  retired_series_ttl_seconds: 90\n  max_series: 5000\n", "r.yml");
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_EQ(r.config.retired_series_ttl_seconds, 90);
  EXPECT_EQ(r.config.max_series, 5000);
  EXPECT_TRUE(
      has_error(parse_config("registry:\n  max_series: 0\n", "b.yml"), "registry.max_series"));
  EXPECT_TRUE(has_error(parse_config("registry:\n  retired_series_ttl_seconds: x\n", "b.yml"),
                        "registry.retired_series_ttl_seconds"));
}

TEST(ExporterConfig, ListenAddressesAreOneOrAListOfTcpAndUnixAddresses) {
  ConfigResult r = parse_config(
      "web:\n  listen_address: [':9478', 'unix:/run/gym/exporter.sock']\n"
      "  unix_socket_mode: '0666'\n  final_capture: /var/lib/gym\n",
      "l.yml");
  ASSERT_TRUE(r.ok()) << r.errors[0];
  EXPECT_EQ(r.config.listen_addresses,
            (std::vector<std::string>{":9478", "unix:/run/gym/exporter.sock"}));
  EXPECT_EQ(r.config.unix_socket_mode, 0666);
  EXPECT_EQ(r.config.final_capture_dir, "/var/lib/gym");
  EXPECT_TRUE(has_error(parse_config("web:\n  listen_address: unix:relative.sock\n", "u.yml"),
                        "unix:/absolute/path"));
  EXPECT_TRUE(has_error(
      parse_config("web:\n  listen_address: unix:/" + std::string(120, 'x') + "\n", "u.yml"),
      "unix:/absolute/path"));
  EXPECT_TRUE(has_error(parse_config("web:\n  listen_address: []\n", "u.yml"),
                        "must be an address or a list"));
  EXPECT_TRUE(
      has_error(parse_config("web:\n  listen_address: [':1', nope]\n", "u.yml"), "got 'nope'"));
  EXPECT_TRUE(has_error(parse_config("web:\n  unix_socket_mode: '0999'\n", "u.yml"), "octal mode"));
  EXPECT_TRUE(has_error(parse_config("web:\n  unix_socket_mode: '1777'\n", "u.yml"), "octal mode"));
}

TEST(ExporterConfig, AnOverlongPortIsAnErrorNotAnException) {
  ConfigResult r = parse_config("web:\n  listen_address: :99999999999999999999\n", "p.yml");
  EXPECT_TRUE(has_error(r, "listen address must be [host]:port")) << r.errors.size();
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

TEST(ExporterConfig, ServiceDiscoveryLabelsAreCheckedAndTheFlagNamesTheFile) {
  ConfigResult r = parse_config(
      "service_discovery:\n  file: /sd/a.json\n  target: node7\n  labels:\n"
      "    gym_run: math\n    slurm_job_id: '42'\n",
      "g.yml");
  ASSERT_TRUE(r.ok()) << r.errors.at(0);
  EXPECT_EQ(r.config.sd.file, "/sd/a.json");
  EXPECT_EQ(r.config.sd.target, "node7");
  EXPECT_EQ(r.config.sd.labels,
            (std::map<std::string, std::string>{{"gym_run", "math"}, {"slurm_job_id", "42"}}));
  ConfigOverrides o;
  o.sd_file = "/other/b.json";
  o.apply(r.config);
  EXPECT_EQ(r.config.sd.file, "/other/b.json");
  for (const char* bad : {"__meta: x", "host: me", "9lives: x", "a-b: x"})
    EXPECT_TRUE(has_error(
        parse_config(std::string("service_discovery:\n  labels:\n    ") + bad + "\n", "g.yml"),
        "g.yml:3:5: service_discovery.labels"))
        << bad;
  EXPECT_TRUE(has_error(parse_config("service_discovery:\n  labels: [a]\n", "g.yml"),
                        "must map label names"));
  EXPECT_TRUE(has_error(parse_config("service_discovery:\n  file: /sd/a.yml\n", "g.yml"),
                        "must end in .json"));
}

TEST(SdFile, WritesItsEntryAtomicallyAndRemovesOnlyWhatItWrote) {
  testing::TempDir tmp;
  const std::string path = tmp.path() + "/a.json";
  SdConfig c{path, "10.0.0.7", {{"gym_run", "say \"hi\"\n"}}};
  std::string error;
  {
    SdFile sd;
    ASSERT_TRUE(sd.write(c, 9478, &error)) << error;
    std::ifstream in(path);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text,
              "[{\"targets\": [\"10.0.0.7:9478\"], \"labels\": {\"gym_run\": "
              "\"say \\\"hi\\\"\\u000a\", \"host\": \"" +
                  host_name() + "\"}}]\n");
  }
  EXPECT_FALSE(std::ifstream(path).good()) << "removed when it stops";
  {
    SdFile sd;
    c.target = "node7:9100";
    ASSERT_TRUE(sd.write(c, 1, &error));
    std::ofstream(path) << "[]\n";  // another exporter took the path over
  }
  EXPECT_TRUE(std::ifstream(path).good()) << "what another wrote stays";
  SdFile sd;
  c.file = tmp.path() + "/missing/a.json";
  EXPECT_FALSE(sd.write(c, 1, &error));
  EXPECT_NE(error.find("cannot write service discovery file"), std::string::npos) << error;
  EXPECT_TRUE(sd.path().empty());
}

TEST(ExporterConfig, ServerTargetsAndTheirErrors) {
  ConfigResult ok = parse_config(
      "memory:\n  interval_seconds: 2\n  pss_interval_seconds: 60\n"
      "  pss_max_stall_seconds: 0.004\n  pss_max_stall_fraction: 0.01\n"
      "  pss_stall_seconds_per_gib: 0.05\n  pss_max_cpu_fraction: 0.02\n"
      "servers:\n  proc_root: /host/proc\n  gone_server_ttl_seconds: 7\n"
      "  cgroup_v2_mount: /host/cg\n  targets:\n"
      "    - {name: a, server_type: model_server, pid: 42, pss: false}\n"
      "    - {name: b, server_type: agent_server, pidfile: /run/b.pid, pss: true}\n"
      "    - {name: c, server_type: other, match: {comm: python3}, pss: auto}\n"
      "    - {name: d, server_type: other, match: {cmdline: 'gym\\.server'}}\n",
      "m.yml");
  ASSERT_TRUE(ok.ok()) << ok.errors.at(0);
  EXPECT_TRUE(ok.deprecations.empty());
  const ServersConfig& servers = ok.config.servers;
  ASSERT_EQ(servers.targets.size(), 4u);
  EXPECT_EQ(memory_of(ok.config).interval_seconds, 2);
  EXPECT_EQ(memory_of(ok.config).pss_interval_seconds, 60);
  EXPECT_EQ(servers.proc_root, "/host/proc");
  EXPECT_EQ(servers.gone_server_ttl_seconds, 7);
  ASSERT_TRUE(servers.mounts.has_value());
  EXPECT_EQ(servers.mounts->v2, "/host/cg");
  EXPECT_EQ(servers.targets[0].pid, 42);
  EXPECT_EQ(servers.targets[0].pss, false);
  EXPECT_EQ(servers.targets[1].pss, true);
  EXPECT_EQ(servers.targets[2].pss, std::nullopt) << "auto: the stall budget decides";
  EXPECT_EQ(servers.targets[3].pss, std::nullopt) << "auto by default";
  const PssBudgetConfig budget = memory_of(ok.config).budget;
  EXPECT_EQ(budget.max_stall_seconds, 0.004);
  EXPECT_EQ(budget.max_stall_fraction, 0.01);
  EXPECT_EQ(budget.prior_seconds_per_gib, 0.05);
  EXPECT_EQ(budget.max_cpu_fraction, 0.02);
  EXPECT_EQ(memory_of(parse_config("", "m.yml").config).budget.max_stall_seconds, 0.010)
      << "a 10 ms cap by default";
  EXPECT_EQ(servers.targets[3].match_cmdline, "gym\\.server");

  auto errors = [](const std::string& targets) {
    return parse_config("servers:\n  targets:\n" + targets, "m.yml");
  };
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, pid: 1, pss: sometimes}\n"),
                        "pss must be auto, true or false"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, pid: 1}\n"
                               "    - {name: a, server_type: x, pid: 2}\n"),
                        "m.yml:4:7: server target name 'a' is used twice (also at 3:7)"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x}\n"), "exactly one of pid"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, pid: 1, pidfile: /p}\n"),
                        "exactly one of pid"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, match: {comm: a, cmdline: b}}\n"),
                        "exactly one of comm, cmdline and ray_actor"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, match: {cmdline: '(('}}\n"),
                        "not a valid regular expression"));
  // Numbers libstdc++'s regex compiler would overflow on (found by fuzzing),
  // refused before it sees them; ordinary counts and back-references pass.
  EXPECT_TRUE(
      has_error(errors("    - {name: a, server_type: x, match: {cmdline: 'a{99999999999}'}}\n"),
                "match.cmdline repeats something more than 1000 times"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, match: {cmdline: 'a{2,5000}'}}\n"),
                        "more than 1000 times"));
  EXPECT_TRUE(
      has_error(errors("    - {name: a, server_type: x, match: {cmdline: '(a)\\77777777777'}}\n"),
                "back-reference above"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, match: {cmdline: '" +
                               std::string(1100, 'a') + "'}}\n"),
                        "longer than 1024"));
  EXPECT_TRUE(errors("    - {name: a, server_type: x, match: {cmdline: '(a)\\1{2,5} [{9999999}]"
                     " \\{99999\\}'}}\n")
                  .ok())
      << "a class and escaped braces are literal";
  EXPECT_TRUE(has_error(errors("    - {server_type: x, pid: 1}\n"), "needs a name"));
  EXPECT_TRUE(has_error(errors("    - {name: a, server_type: x, pid: 1, extra: 2}\n"),
                        "unknown key 'servers.targets[].extra'"));
  EXPECT_TRUE(has_error(parse_config("memory:\n  interval_seconds: 0\n", "m.yml"), "at least"));
  EXPECT_TRUE(has_error(parse_config("servers:\n  targets: 3\n", "m.yml"), "must be a list"));
  EXPECT_TRUE(has_error(parse_config("servers:\n  nonsense: 3\n", "m.yml"),
                        "unknown key 'servers.nonsense'"));
  const ConfigResult cpu = parse_config("servers:\n  cgroup_v1_cpu_mount: /host/cpu\n", "m.yml");
  ASSERT_TRUE(cpu.ok()) << cpu.errors.front();
  ASSERT_TRUE(cpu.config.servers.mounts.has_value());
  EXPECT_EQ(cpu.config.servers.mounts->v1_cpu, "/host/cpu");
  EXPECT_EQ(cpu.config.servers.mounts->v1_memory, "");
}

// The keys that moved to servers: are read where they were, for one release,
// each with a deprecation line naming where it is; set in both places they
// are an error, and the collectors' sections no longer know them.
TEST(ExporterConfig, DeprecatedServerKeysAreReadWithAWarningUntilTheNextRelease) {
  ConfigResult old = parse_config(
      "memory:\n  proc_root: /p\n  gone_server_ttl_seconds: 9\n  targets:\n"
      "    - {name: a, server_type: x, pid: 1}\n"
      "cgroup:\n  v1_memory_mount: /cg1\n",
      "old.yml");
  ASSERT_TRUE(old.ok()) << old.errors.at(0);
  EXPECT_EQ(old.config.servers.proc_root, "/p");
  EXPECT_EQ(old.config.servers.gone_server_ttl_seconds, 9);
  ASSERT_EQ(old.config.servers.targets.size(), 1u);
  ASSERT_TRUE(old.config.servers.mounts.has_value());
  EXPECT_EQ(old.config.servers.mounts->v1_memory, "/cg1");
  ASSERT_EQ(old.deprecations.size(), 4u);
  EXPECT_EQ(old.deprecations[0],
            "old.yml:4:3: memory.targets is deprecated: move it to servers.targets (read as such "
            "until the next release)");
  ConfigResult both = parse_config(
      "memory:\n  targets:\n    - {name: a, server_type: x, pid: 1}\n"
      "servers:\n  targets: []\n",
      "both.yml");
  EXPECT_TRUE(has_error(both, "memory.targets and servers.targets are both set"));
}

}  // namespace
}  // namespace gym::exporter
