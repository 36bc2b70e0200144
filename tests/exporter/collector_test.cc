// The collector framework and the App around it: every collector kind is
// registered by its own file (here, a probe registered by this test alone),
// reads its own configuration section, starts and stops with the exporter;
// what the exposition serves is exactly the contract table.
#include <crypt.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "app.h"
#include "collector.h"
#include "collectors/verdict.h"
#include "contract/families.h"
#include "exposition/exposition.h"
#include "exposition/protobuf.h"
#include "exposition/text.h"
#include "gym/contract.h"
#include "gym/metered_semaphore.h"
#include "gym/segment_writer.h"
#include "host/proc_events.h"
#include "http_client.h"
#include "sampled_collector.h"
#include "test_support.h"
#include "web_config.h"
#include "yaml_reader.h"

namespace gym::exporter {
namespace {

using namespace std::chrono_literals;
using testing::http;
using testing::TempDir;

// ------------------------------------------------- a collector added by a test

// What the probe saw; the probe's section is `probe: {family: NAME}`.
std::atomic<int> g_probe_port{0};
std::atomic<int> g_probe_status_at_stop{-1};
std::atomic<int> g_probe_started{0};

struct ProbeSettings : CollectorSettings {
  std::string family;  // none: it serves nothing
};

class Probe : public Collector {
 public:
  explicit Probe(std::string family) : family_(std::move(family)) {}
  void start() override { ++g_probe_started; }
  void stop() override {
    // The HTTP server must still answer while collectors stop.
    if (g_probe_port > 0) g_probe_status_at_stop = http(g_probe_port, "GET", "/metrics").status;
  }
  void collect(const Emit& emit) override {
    if (family_.empty()) return;
    Families out;
    add_simple(out, Row::named(family_), 1, {{"version", "probe"}, {"revision", "probe"}});
    emit(out.back());
  }

 private:
  std::string family_;
};

GYM_REGISTER_COLLECTOR({.name = "probe",
                        .order = 1000,
                        .parse =
                            [](YamlReader& rd, const YAML::Node& n) {
                              auto s = std::make_shared<ProbeSettings>();
                              rd.mapping(n, "probe", {{"family", [&](const YAML::Node& v) {
                                                         rd.string(v, "probe.family", s->family);
                                                       }}});
                              return std::shared_ptr<const CollectorSettings>(s);
                            },
                        .make =
                            [](const CollectorSettings* s, const CollectorContext&) {
                              return std::make_unique<Probe>(
                                  static_cast<const ProbeSettings*>(s)->family);
                            }});

TEST(Collectors, AKindRegisteredInItsOwnFileIsBuiltWithItsOwnSection) {
  ConfigResult r = parse_config("probe:\n  family: gym_exporter_series\n", "g.yml");
  ASSERT_TRUE(r.ok()) << r.errors.at(0);
  TempDir tmp;
  // With a verdict board: every kind, the verdict collector included.
  CollectorContext context{std::make_shared<SharedRegistry>(tmp.path())};
  context.verdicts = std::make_shared<VerdictBoard>();
  auto collectors = make_collectors(r.config, context);
  ASSERT_EQ(collectors.size(), collector_kinds().size());
  Families seen;
  collectors.back()->collect([&](const Family& f) { seen.push_back(f); });
  ASSERT_EQ(seen.size(), 1u) << "the probe is last (order 1000)";
  EXPECT_EQ(seen[0].name, "gym_exporter_series");

  ConfigResult bad = parse_config("probe:\n  famly: x\n", "g.yml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.errors[0].find("g.yml:2:3: unknown key 'probe.famly'"), std::string::npos)
      << bad.errors[0];
}

TEST(Exposition, AFamilyThatBreaksTheContractTableIsNotServedButCountedAndLoggedOnce) {
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(std::make_unique<Probe>("gym_no_such_family"));
  c.push_back(std::make_unique<Probe>("gym_exporter_series"));  // labels it has no row for
  std::vector<std::string> logged;
  Exposition e(std::move(c), [&](const std::string& m) { logged.push_back(m); });
  std::string once = e.render();
  e.render();
  EXPECT_EQ(once.find("gym_no_such_family"), std::string::npos);
  EXPECT_EQ(once.find("gym_exporter_series{"), std::string::npos);
  EXPECT_NE(once.find("gym_exporter_contract_violations_total 2"), std::string::npos) << once;
  EXPECT_EQ(e.violations(), 4u);
  ASSERT_EQ(logged.size(), 2u);
  EXPECT_NE(logged[0].find("no row in the contract table"), std::string::npos) << logged[0];
  EXPECT_NE(logged[1].find("has label version"), std::string::npos) << logged[1];
}

TEST(Exposition, NameFilterServesTheFamiliesAskedForAHistogramAlsoByItsSampleNames) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  const std::vector<Label> labels = {{"nemo_gym_resources_operation", "verify"},
                                     {"nemo_gym_resources_executor", "inline"}};
  w.histogram("gym_resources_operation_queue_duration_seconds", labels, kOperationBoundsNs, 1e9)
      .observe(2000000);
  Gauge queued = w.gauge("gym_resources_operation_queued", labels);  // lives while read
  queued.add(1);
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {std::make_shared<SharedRegistry>(tmp.path())}));
  Exposition e(std::move(c));
  const std::string all = e.render(TextEncoder());
  EXPECT_NE(all.find("gym_resources_operation_queued{"), std::string::npos) << all;
  const std::string by_bucket =
      e.render(TextEncoder(), {"gym_resources_operation_queue_duration_seconds_bucket"});
  EXPECT_NE(by_bucket.find("gym_resources_operation_queue_duration_seconds_bucket{"),
            std::string::npos)
      << by_bucket;
  EXPECT_NE(by_bucket.find("gym_resources_operation_queue_duration_seconds_count{"),
            std::string::npos)
      << "the whole histogram";
  EXPECT_EQ(by_bucket.find("gym_resources_operation_queued{"), std::string::npos);
  EXPECT_EQ(by_bucket.find("gym_exporter_scrape_duration_seconds"), std::string::npos);
  const std::string by_name = e.render(
      TextEncoder(), {"gym_resources_operation_queued", "gym_exporter_scrape_duration_seconds"});
  EXPECT_NE(by_name.find("gym_resources_operation_queued{"), std::string::npos);
  EXPECT_NE(by_name.find("gym_exporter_scrape_duration_seconds "), std::string::npos);
  EXPECT_EQ(by_name.find("_bucket"), std::string::npos);
  EXPECT_EQ(e.render(TextEncoder(), {"gym_resources_operation_queued_bucket"})
                .find("gym_resources_operation_queued"),
            std::string::npos)
      << "sample suffixes only for histograms";
}

// Families of the registry that the contract table does not have, before
// and after a served one in the snapshot's order: their series are counted
// as unknown (a server's identity is not: the server trees read it), never
// served, and no contract violation.
TEST(Exposition, SeriesOfFamiliesNotInTheTableAreCountedAsUnknownAndNotServed) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  const std::vector<Label> op = {{"nemo_gym_resources_operation", "verify"},
                                 {"nemo_gym_resources_executor", "inline"}};
  Gauge queued = w.gauge("gym_resources_operation_queued", op);  // lives while read
  queued.add(1);
  w.counter("aaa_custom_total", {}).add(1);
  for (const char* v : {"a", "b", "c"}) {
    const std::vector<Label> l = {{"k", v}};
    w.counter("zzz_custom_total", l).add(1);
  }
  const std::vector<Label> server = {{"server_name", "verifier"},
                                     {"server_type", "resources_servers"}};
  Gauge identity = w.gauge("gym_server_identity", server);  // lives while read
  identity.set(1);
  std::vector<std::string> logged;
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {std::make_shared<SharedRegistry>(tmp.path()),
                                          [&](const std::string& m) { logged.push_back(m); }}));
  Exposition e(std::move(c));
  const std::string text = e.render(TextEncoder());
  EXPECT_NE(text.find("gym_resources_operation_queued{"), std::string::npos) << text;
  EXPECT_EQ(text.find("aaa_custom"), std::string::npos) << text;
  EXPECT_EQ(text.find("zzz_custom"), std::string::npos) << text;
  EXPECT_NE(text.find("\ngym_exporter_registry_unknown_series 4\n"), std::string::npos) << text;
  EXPECT_EQ(e.violations(), 0u);
  EXPECT_EQ(logged.size(), 2u) << "each unknown family logged once";
}

// ------------------------------------------------------------- the App

std::string bcrypt(const std::string& password) {
  char salt[64];
  if (crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof salt) == nullptr) return {};
  crypt_data data{};
  const char* h = crypt_r(password.c_str(), salt, &data);
  return h ? h : "";
}

std::string basic(const std::string& user, const std::string& password) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const std::string in = user + ":" + password;
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint32_t(uint8_t(in[i + 2]));
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? k[v & 63] : '=';
  }
  return "Authorization: Basic " + out + "\r\n";
}

Flags app_flags(const TempDir& tmp) {
  Flags f;
  f.overrides.listen_addresses = {"127.0.0.1:0"};
  f.overrides.registry_dir = tmp.sub("registry");
  f.config_file = tmp.sub("gym.yml");
  f.web_config_file = tmp.sub("web.yml");
  return f;
}

TEST(Exposition, NameFilterTakesTheOpenTelemetryNamesTheReplyCarriesToo) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  const std::vector<Label> labels = {{"nemo_gym_concurrency_component", "agent_server"},
                                     {"nemo_gym_concurrency_limit_name", "x"}};
  Gauge depth = w.gauge("gym_concurrency_queue_depth", labels);
  depth.add(3);
  std::vector<Label> waited = labels;
  waited.push_back({"nemo_gym_concurrency_wait_outcome", "admitted"});
  w.histogram("gym_concurrency_wait_duration_seconds", waited, kOperationBoundsNs, 1e9)
      .observe(2000000);
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {std::make_shared<SharedRegistry>(tmp.path())}));
  Exposition e(std::move(c));
  const std::string depth_only = e.render(TextEncoder(), {"gym.concurrency.queue_depth"});
  EXPECT_NE(depth_only.find("gym_concurrency_queue_depth{"), std::string::npos) << depth_only;
  EXPECT_EQ(depth_only.find("gym_concurrency_wait_duration_seconds"), std::string::npos);
  const std::string by_sample = e.render(TextEncoder(), {"gym.concurrency.wait_duration_count"});
  EXPECT_NE(by_sample.find("gym_concurrency_wait_duration_seconds_count{"), std::string::npos)
      << by_sample;
  EXPECT_EQ(by_sample.find("gym_concurrency_queue_depth"), std::string::npos);
}

TEST(Exposition, AnExemplarIsOnItsBucketLineInOpenMetricsAndInProtobufNeverInText) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  const std::vector<Label> labels = {{"nemo_gym_concurrency_component", "agent_server"},
                                     {"nemo_gym_concurrency_limit_name", "x"},
                                     {"nemo_gym_concurrency_wait_outcome", "admitted"}};
  Histogram h = w.histogram("gym_concurrency_wait_duration_seconds", labels, kOperationBoundsNs,
                            1e9, /*native=*/true);
  const std::optional<TraceContext> trace =
      TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
  ASSERT_TRUE(trace);
  h.observe(2000000, *trace);  // 2 ms
  h.observe(3000000000);       // 3 s, without: counted, no exemplar
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {std::make_shared<SharedRegistry>(tmp.path())}));
  Exposition e(std::move(c));
  const std::string om = e.render(OpenMetricsEncoder());
  std::vector<std::string> with;
  std::istringstream in(om);
  for (std::string line; std::getline(in, line);)
    if (line.find(" # {") != std::string::npos) with.push_back(line);
  ASSERT_EQ(with.size(), 1u) << om;
  // The first bucket whose bound holds 2 ms, counting it (and nothing else yet).
  double le_before = 0;
  for (size_t i = 0; i < std::size(kOperationBoundsNs); ++i)
    if (kOperationBoundsNs[i] < 2000000) le_before = double(kOperationBoundsNs[i]) / 1e9;
  const std::regex line(
      R"re(gym_concurrency_wait_duration_seconds_bucket\{[^}]*le="([0-9.e+-]+)"\} 1 )re"
      R"re(# \{trace_id="0af7651916cd43dd8448eb211c80319c",span_id="b7ad6b7169203331"\} )re"
      R"re(0\.002 (1[0-9]{9}(\.[0-9]+)?))re");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(with[0], m, line)) << with[0];
  EXPECT_GE(std::stod(m[1].str()), 0.002);
  EXPECT_GT(0.002, le_before);
  EXPECT_NEAR(std::stod(m[2].str()), double(std::time(nullptr)), 60);
  EXPECT_EQ(e.render(TextEncoder()).find("trace_id"), std::string::npos) << "text 0.0.4 has none";
  const std::string proto = e.render(ProtobufEncoder());
  // In a classic bucket and in the native histogram's exemplars: twice.
  size_t found = 0;
  for (size_t at = proto.find("0af7651916cd43dd8448eb211c80319c"); at != std::string::npos;
       at = proto.find("0af7651916cd43dd8448eb211c80319c", at + 1))
    ++found;
  EXPECT_EQ(found, 2u);
  EXPECT_NE(proto.find("span_id"), std::string::npos);
}

TEST(Exposition, EachEscapingSchemeNamesTheRegistrysFamiliesAndLabelsAndTheExportersOwn) {
  TempDir tmp;
  SegmentWriter w(tmp.path());
  const std::vector<Label> labels = {{"nemo_gym_concurrency_component", "agent_server"},
                                     {"nemo_gym_concurrency_limit_name", "x"}};
  Gauge depth = w.gauge("gym_concurrency_queue_depth", labels);
  depth.add(3);
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {std::make_shared<SharedRegistry>(tmp.path())}));
  Exposition e(std::move(c));
  // The exposition without its one number that changes from one to the next.
  const auto render = [&](std::optional<Escaping> scheme) {
    std::istringstream in(e.render(OpenMetricsEncoder(scheme)));
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.starts_with("#") || line.find("scrape_duration") == std::string::npos)
        out += line + "\n";
    return out;
  };
  const std::string legacy = render(std::nullopt);
  EXPECT_EQ(render(Escaping::kUnderscores), legacy) << "the legacy names";
  EXPECT_NE(legacy.find("gym_concurrency_queue_depth{nemo_gym_concurrency_component="
                        "\"agent_server\",nemo_gym_concurrency_limit_name=\"x\"} 3\n"),
            std::string::npos)
      << legacy;
  const std::string dots = render(Escaping::kDots);
  EXPECT_NE(dots.find("# TYPE gym_dot_concurrency_dot_queue__depth gauge\n"
                      "gym_dot_concurrency_dot_queue__depth{nemo_dot_gym_dot_concurrency_dot_"
                      "component=\"agent_server\",nemo_dot_gym_dot_concurrency_dot_limit__name="
                      "\"x\"} 3\n"),
            std::string::npos)
      << dots;
  EXPECT_NE(dots.find("# TYPE gym__exporter__scrape__duration__seconds gauge\n"), std::string::npos)
      << "a family without an OpenTelemetry name unescapes to its own";
  const std::string text_dots = e.render(TextEncoder(Escaping::kDots));
  EXPECT_NE(text_dots.find("gym_dot_concurrency_dot_queue__depth{nemo_dot_gym_dot_concurrency_dot_"
                           "component=\"agent_server\",nemo_dot_gym_dot_concurrency_dot_limit__"
                           "name=\"x\"} 3\n"),
            std::string::npos)
      << "text 1.0.0 too: " << text_dots;
  const std::string values = render(Escaping::kValues);
  EXPECT_NE(values.find("U__gym_2E_concurrency_2E_queue__depth{U__nemo_2E_gym_2E_concurrency_2E_"
                        "component=\"agent_server\",U__nemo_2E_gym_2E_concurrency_2E_limit__name="
                        "\"x\"} 3\n"),
            std::string::npos)
      << values;
  EXPECT_NE(values.find("# TYPE gym_exporter_scrape_duration_seconds gauge\n"), std::string::npos)
      << "a legacy name stays";
  const std::string utf8 = render(Escaping::kAllowUtf8);
  EXPECT_NE(utf8.find("{\"gym.concurrency.queue_depth\",\"nemo.gym.concurrency.component\"="
                      "\"agent_server\",\"nemo.gym.concurrency.limit_name\"=\"x\"} 3\n"),
            std::string::npos)
      << utf8;
}

// The lines of `text` that start with `family{` and name `limit`.
std::vector<std::string> lines_of(const std::string& text, const std::string& family,
                                  const std::string& limit) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(family + "{") && line.find("\"" + limit + "\"") != std::string::npos)
      out.push_back(line);
  return out;
}

TEST(Exposition, AgesOfALimitThatIsClosedOrWhoseWriterExitedGoWhileItsAdmissionsStay) {
  TempDir tmp;
  testing::Gate close, exit_now;
  testing::Ready ready;
  // One writer closes its limit; another is killed while it holds a slot.
  const pid_t closer = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    {
      MeteredSemaphore sem(2, Component::kAgentServer, "closed_limit");
      sem.acquire();
      sem.release();
      sem.acquire();
      ready.signal();
      close.wait();
      sem.release();
    }
    ready.signal();
    exit_now.wait();
    return 0;
  });
  const pid_t killed = testing::spawn([&] {
    close.close_write();  // only the test holds the gates open
    exit_now.close_write();
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    MeteredSemaphore sem(2, Component::kAgentServer, "exited_limit");
    sem.acquire();
    ready.signal();
    for (;;) ::pause();
    return 0;
  });
  ready.wait(2);
  auto registry = std::make_shared<SharedRegistry>(tmp.path());
  std::string why;
  ASSERT_TRUE(registry->with([&](RegistryReader& r) { return r.claim(&why); })) << why;
  std::vector<std::unique_ptr<Collector>> c;
  c.push_back(make_collector("registry", {registry}));
  Exposition e(std::move(c));
  std::string text = e.render(TextEncoder());
  for (const char* limit : {"closed_limit", "exited_limit"}) {
    EXPECT_EQ(lines_of(text, "gym_concurrency_oldest_hold_seconds", limit).size(), 1u) << limit;
    EXPECT_EQ(lines_of(text, "gym_concurrency_oldest_wait_seconds", limit).size(), 1u) << limit;
  }
  close.open();
  ready.wait(1);
  ::kill(killed, SIGKILL);
  testing::wait_exit(killed);
  text = e.render(TextEncoder());
  text += e.render(TextEncoder());  // and at every scrape after
  for (const char* limit : {"closed_limit", "exited_limit"}) {
    EXPECT_TRUE(lines_of(text, "gym_concurrency_limit", limit).empty()) << limit;
    EXPECT_TRUE(lines_of(text, "gym_concurrency_oldest_hold_seconds", limit).empty())
        << limit << ": gone with its limit\n"
        << text;
    EXPECT_TRUE(lines_of(text, "gym_concurrency_oldest_wait_seconds", limit).empty()) << limit;
  }
  const auto closed = lines_of(text, "gym_concurrency_admissions_total", "closed_limit");
  ASSERT_EQ(closed.size(), 2u);
  EXPECT_TRUE(closed[0].ends_with(" 2")) << closed[0] << ": folded and kept";
  const auto exited = lines_of(text, "gym_concurrency_admissions_total", "exited_limit");
  ASSERT_EQ(exited.size(), 2u);
  EXPECT_TRUE(exited[0].ends_with(" 1")) << exited[0];
  exit_now.open();
  testing::wait_exit(closer);
}

// process_open_fds, as the process collector emits it now.
double open_fds_now(Collector& process) {
  double fds = -1;
  process.collect([&](const Family& f) {
    if (f.name == "process_open_fds") fds = f.metric.at(0).gauge.value;
  });
  return fds;
}

TEST(ProcessCollector, OpenFdsCountsEachDescriptorTheProcessOpensAndClosesOnce) {
  auto process = make_collector("process", {nullptr});
  const double before = open_fds_now(*process);
  ASSERT_GT(before, 0);
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  EXPECT_EQ(open_fds_now(*process), before + 50);
  for (int fd : fds) ::close(fd);
  EXPECT_EQ(open_fds_now(*process), before);
}

TEST(App, ARefusedReloadChangesNothingNotEvenTheBasicAuthUsers) {
  TempDir tmp;
  const Flags flags = app_flags(tmp);
  std::ofstream(flags.config_file) << "log:\n  level: error\n";
  std::ofstream(flags.web_config_file) << "basic_auth_users:\n  alice: " << bcrypt("a") << "\n";
  std::string error;
  auto app = App::start(flags, load(flags), &error);
  ASSERT_TRUE(app) << error;
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("alice", "a")).status, 200);
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("bob", "b")).status, 401);

  // A valid web file beside a broken main file: nothing is applied.
  std::ofstream(flags.web_config_file) << "basic_auth_users:\n  bob: " << bcrypt("b") << "\n";
  std::ofstream(flags.config_file) << "log: [broken\n";
  EXPECT_FALSE(app->reload());
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("alice", "a")).status, 200);
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("bob", "b")).status, 401);

  // Both valid: both applied.
  std::ofstream(flags.config_file) << "log:\n  level: error\n";
  EXPECT_TRUE(app->reload());
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("alice", "a")).status, 401);
  EXPECT_EQ(http(app->port(), "GET", "/metrics", basic("bob", "b")).status, 200);
}

// #45's findings 7-9: the whole password is compared (a NUL and what follows
// it are not ignored), the scheme is matched in any case (RFC 9110 §11.1),
// and an unknown user costs a bcrypt check as a wrong password does, so the
// time of a refusal does not say which users exist.
TEST(App, BasicAuthTakesTheWholePasswordAnyCaseOfTheSchemeAndChecksUnknownUsersToo) {
  TempDir tmp;
  const Flags flags = app_flags(tmp);
  std::ofstream(flags.config_file) << "log:\n  level: error\n";
  std::ofstream(flags.web_config_file)
      << "basic_auth_users:\n  alice: " << bcrypt("correct horse") << "\n";
  std::string error;
  auto app = App::start(flags, load(flags), &error);
  ASSERT_TRUE(app) << error;
  const int port = app->port();
  EXPECT_EQ(http(port, "GET", "/metrics", basic("alice", "correct horse")).status, 200);
  using namespace std::string_literals;
  EXPECT_EQ(http(port, "GET", "/metrics", basic("alice", "correct horse\0"s)).status, 401)
      << "a NUL appended";
  EXPECT_EQ(http(port, "GET", "/metrics", basic("alice", "correct horse\0anything"s)).status, 401);
  EXPECT_EQ(http(port, "GET", "/metrics", basic("alice", "correct hors")).status, 401);
  for (const std::string scheme : {"basic ", "BASIC ", "bAsIc "}) {
    std::string header = basic("alice", "correct horse");
    header.replace(header.find("Basic "), 6, scheme);
    EXPECT_EQ(http(port, "GET", "/metrics", header).status, 200) << scheme;
  }
  const uint64_t before = password_verifications();
  EXPECT_EQ(http(port, "GET", "/metrics", basic("mallory", "a guess")).status, 401);
  EXPECT_EQ(password_verifications(), before + 1) << "an unknown user is checked all the same";
}

TEST(App, CollectorsStopWhileScrapesAreStillServedAndStartOnce) {
  TempDir tmp;
  Flags flags = app_flags(tmp);
  flags.web_config_file.clear();
  std::ofstream(flags.config_file) << "log:\n  level: error\n";
  std::string error;
  const int started = g_probe_started;
  auto app = App::start(flags, load(flags), &error);
  ASSERT_TRUE(app) << error;
  EXPECT_EQ(g_probe_started, started + 1);
  g_probe_port = app->port();
  g_probe_status_at_stop = -1;
  app->stop();
  g_probe_port = 0;
  EXPECT_EQ(g_probe_status_at_stop, 200) << "the final work is scrapeable";
  app->stop();  // idempotent
}

TEST(IntervalCollector, StartTwiceAndStopTwiceSampleOnceEach) {
  struct Counting : IntervalCollector {
    Counting() : IntervalCollector(std::chrono::hours(1)) {}
    ~Counting() override { stop(); }
    void sample() override { ++samples; }
    void collect(const Emit&) override {}
    std::atomic<int> samples{0};
  } c;
  c.start();
  c.start();
  EXPECT_EQ(c.samples, 1);
  c.stop();
  c.stop();
  EXPECT_EQ(c.samples, 2) << "one first sample, one final sample";
  c.start();  // a stopped collector stays stopped
  EXPECT_EQ(c.samples, 2);
}

TEST(IntervalCollector, ASampleLongerThanTheIntervalCountsTheStartsItMissed) {
  struct Slow : IntervalCollector {
    Slow() : IntervalCollector(std::chrono::milliseconds(20)) {}
    ~Slow() override { stop(); }
    void sample() override {
      std::this_thread::sleep_for(std::chrono::milliseconds(60));  // three periods
      ++samples;
    }
    void collect(const Emit&) override {}
    std::atomic<int> samples{0};
  } c;
  c.start();
  EXPECT_EQ(c.overruns(), 0u) << "the first sample is not in a period";
  while (c.samples < 4) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  c.stop();
  // Each sample on the thread ran through at least two further starts.
  EXPECT_GE(c.overruns(), 2u * 3);
}

// The per-server collectors share one sampling thread (sample_thread.h):
// collectors naming one group sample on one thread, each on its own period,
// and a stop waits for a sample of its own that runs.
TEST(IntervalCollector, CollectorsOfOneGroupSampleOnOneThreadEachOnItsPeriod) {
  struct Grouped : IntervalCollector {
    explicit Grouped(std::chrono::milliseconds period) : IntervalCollector(period) {}
    ~Grouped() override { stop(); }
    std::string sampling_group() const override { return "interval-collector-test"; }
    void sample() override {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      ++samples;
    }
    void collect(const Emit&) override {}
    std::set<std::thread::id> on_thread() {
      std::lock_guard<std::mutex> lock(mu);
      std::set<std::thread::id> out = threads;
      out.erase(std::this_thread::get_id());  // start's and stop's samples
      return out;
    }
    std::mutex mu;
    std::set<std::thread::id> threads;
    std::atomic<int> samples{0};
  };
  Grouped fast(std::chrono::milliseconds(5)), slow(std::chrono::milliseconds(20));
  Grouped alone(std::chrono::milliseconds(5));
  struct Own : Grouped {
    using Grouped::Grouped;
    std::string sampling_group() const override { return {}; }
  } own(std::chrono::milliseconds(5));
  fast.start();
  slow.start();
  own.start();
  for (int i = 0; i < 1000 && (slow.samples < 4 || fast.samples < 4 || own.samples < 4); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  fast.stop();
  slow.stop();
  own.stop();
  ASSERT_GE(slow.samples, 4);
  ASSERT_GE(fast.samples, 4);
  EXPECT_EQ(fast.on_thread().size(), 1u) << "one sampling thread";
  EXPECT_EQ(fast.on_thread(), slow.on_thread()) << "the group's, shared";
  EXPECT_EQ(own.on_thread().size(), 1u);
  EXPECT_NE(own.on_thread(), fast.on_thread()) << "no group: a thread of its own";
  const int after_stop = fast.samples;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(fast.samples, after_stop) << "stopped: no sample after the final one";
  EXPECT_EQ(alone.samples, 0) << "never started";
}

TEST(IntervalCollector, OnceTakesOneSampleAndNoThread) {
  struct Counting : IntervalCollector {
    Counting() : IntervalCollector(std::chrono::hours(1)) {}
    ~Counting() override { stop(); }
    void sample() override { ++samples; }
    void collect(const Emit&) override {}
    std::atomic<int> samples{0};
  };
  auto owned = std::make_unique<Counting>();
  Counting* c = owned.get();
  std::vector<std::unique_ptr<Collector>> list;
  list.push_back(std::move(owned));
  Exposition e(std::move(list));
  e.refresh();
  e.render();
  EXPECT_EQ(c->samples, 1);
  e.stop();
  EXPECT_EQ(c->samples, 1) << "never started: no final sample";
}

// -------------------------------------- the demo's families against the table

// name -> "type label,label" from a text exposition ("le" left out).
std::map<std::string, std::string> families_of(const std::string& text) {
  std::map<std::string, std::string> type;
  std::map<std::string, std::set<std::string>> labels;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream w(line.substr(7));
      std::string name, t;
      w >> name >> t;
      type[name] = t;
      labels[name];
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    std::string name = line.substr(0, std::min(brace, line.find(' ')));
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!type.count(name) && name.ends_with(suffix))
        name = name.substr(0, name.size() - std::string_view(suffix).size());
    if (brace == std::string::npos) continue;
    size_t pos = brace + 1;
    while (pos < line.size() && line[pos] != '}') {
      const size_t eq = line.find('=', pos);
      const std::string label = line.substr(pos, eq - pos);
      if (label != "le") labels[name].insert(label);
      pos = eq + 2;
      while (pos < line.size() && line[pos] != '"') pos += line[pos] == '\\' ? 2 : 1;
      pos += 1;
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
  }
  std::map<std::string, std::string> out;
  for (const auto& [name, t] : type) {
    std::string l;
    for (const std::string& x : labels[name]) l += (l.empty() ? "" : ",") + x;
    out[name] = t + " " + l;
  }
  return out;
}

// label -> the values served, from a text exposition ("le" left out).
std::map<std::string, std::set<std::string>> label_values_of(const std::string& text) {
  std::map<std::string, std::set<std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t pos = line.find('{');
    if (pos == std::string::npos) continue;
    ++pos;
    while (pos < line.size() && line[pos] != '}') {
      const size_t eq = line.find('=', pos);
      const std::string label = line.substr(pos, eq - pos);
      size_t end = eq + 2;
      while (end < line.size() && line[end] != '"') end += line[end] == '\\' ? 2 : 1;
      if (label != "le") out[label].insert(line.substr(eq + 2, end - eq - 2));
      pos = end + 1;
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
  }
  return out;
}

// docs/metrics.md's labels table: label -> its listed values (a row whose
// values start with a `value`), or nullopt (a row that describes them).
std::map<std::string, std::optional<std::set<std::string>>> documented_label_values() {
  std::map<std::string, std::optional<std::set<std::string>>> out;
  std::ifstream doc(GYM_METRICS_DOC);
  std::string line;
  bool in_labels = false;
  auto ticked = [](const std::string& cell) {
    std::set<std::string> words;
    for (size_t b = cell.find('`'); b != std::string::npos; b = cell.find('`', b + 1)) {
      const size_t e = cell.find('`', b + 1);
      if (e == std::string::npos) break;
      words.insert(cell.substr(b + 1, e - b - 1));
      b = e;
    }
    return words;
  };
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) in_labels = line == "## Labels and their values";
    if (!in_labels || line.rfind("| `", 0) != 0) continue;
    const size_t bar = line.find(" | ", 2);
    const std::string labels = line.substr(2, bar - 2);
    const std::string values = line.substr(bar + 3, line.rfind(" |") - bar - 3);
    for (const std::string& label : ticked(labels)) {
      if (values.rfind('`', 0) == 0)
        out[label] = ticked(values);
      else
        out[label] = std::nullopt;
    }
  }
  return out;
}

TEST(Golden, TheDemosExpositionServesEveryContractRowAndNothingElse) {
  TempDir tmp;
  const std::string dir = tmp.sub("registry");
  pid_t demo = testing::spawn([&] {
    ::execl(GYM_DEMO_BIN, GYM_DEMO_BIN, ("--registry.dir=" + dir).c_str(), "--duration=30",
            nullptr);
    return 127;
  });
  Flags flags;
  flags.overrides.registry_dir = dir;
  Loaded loaded = load(flags);
  ASSERT_TRUE(loaded.ok());
  auto registry = std::make_shared<SharedRegistry>(dir);
  std::map<std::string, std::string> got;
  std::string text;
  // Servers' own cgroups: the demo's servers share the test's cgroup, so these
  // are served only by the fixture test of the cgroup collector
  // (CgroupCollector.ServesEveryCgroupFamilyForAFixtureV2Tree). GPUs: this
  // host has none; the gpu collector's tests serve them through a fake NVML
  // (GpuCollector.MemoryPerServerAndTheUnattributedRemainderAddUp...).
  // Process exits: only where the kernel's process events can be had
  // (root); DeathsTest counts them with the real connector.
  std::string no_events;
  const bool events = procev::ProcConnector::open(&no_events) != nullptr;
  const auto fixture_only = [&](const FamilySpec& row) {
    return row.name.starts_with("gym_server_cgroup_") || row.name.starts_with("gym_gpu_") ||
           row.name.starts_with("gym_server_gpu_") ||
           (!events && row.name == "gym_server_process_exits_total");
  };
  const size_t kFixtureOnly =
      size_t(std::count_if(std::begin(kFamilies), std::end(kFamilies), fixture_only));
  // Every family appears within seconds (timeouts and crashed verifiers too).
  for (int i = 0; i < 150 && got.size() < std::size(kFamilies) - kFixtureOnly; ++i) {
    std::this_thread::sleep_for(100ms);
    Exposition e(make_collectors(loaded.config.config, {registry}));
    e.start();
    text = e.render();
    got = families_of(text);
    e.stop();
  }
  ::kill(demo, SIGTERM);
  testing::wait_exit(demo);
  for (const FamilySpec& row : kFamilies)
    if (!fixture_only(row)) {
      EXPECT_TRUE(got.count(std::string(row.name))) << row.name << " has a row but is not served";
    }
  for (const auto& [name, _] : got)
    EXPECT_NE(find_family(name), nullptr) << name << " is served without a row";
  // The golden file: each family's type and label names, as the demo shows them.
  std::ifstream golden(GYM_GOLDEN);
  std::map<std::string, std::string> want;
  std::string name, rest;
  while (golden >> name && std::getline(golden, rest)) want[name] = rest.substr(1);
  if (!events) want.erase("gym_server_process_exits_total");
  if (std::getenv("GYM_UPDATE_GOLDEN")) {
    std::ofstream out(GYM_GOLDEN);
    for (const auto& [n, v] : got) out << n << " " << v << "\n";
    GTEST_SKIP() << "golden file written";
  }
  EXPECT_EQ(got, want) << "regenerate with GYM_UPDATE_GOLDEN=1 when the change is intended";
  // docs/metrics.md's table of labels: every label served has a row, and
  // every value served of a label whose row lists its values is listed.
  const auto documented = documented_label_values();
  for (const auto& [label, values] : label_values_of(text)) {
    auto it = documented.find(label);
    if (it == documented.end()) {
      ADD_FAILURE() << "label " << label << " has no row in docs/metrics.md's labels table";
      continue;
    }
    if (!it->second) continue;  // described, not listed
    for (const std::string& v : values)
      EXPECT_TRUE(it->second->contains(v))
          << label << "=\"" << v << "\" is served but not listed in docs/metrics.md";
  }
}

}  // namespace
}  // namespace gym::exporter
