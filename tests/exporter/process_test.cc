// gym-exporter as a user runs it: a real process, real writers in child
// processes, a real HTTP client, and Prometheus' own promtool.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zlib.h>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "gym/limit_meter.h"
#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "gym/server_identity.h"
#include "gym_metrics.h"
#include "http_client.h"
#include "test_support.h"

namespace gym {
namespace {

using namespace std::chrono_literals;
using testing::http;
using testing::Response;
using testing::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs a command through the shell; returns exit status and output.
std::pair<int, std::string> shell(const std::string& cmd) {
  std::string out;
  // Its standard error too, unless the command sends it elsewhere.
  const bool own = cmd.find(" 2>") != std::string::npos;
  FILE* p = ::popen((own ? cmd : cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string exporter() {
  return GYM_EXPORTER_BIN;
}

// A writer process like a Gym resources server: a declared identity, a full
// limit with an admission timeout, operations with two outcomes.
pid_t start_writer(const std::string& dir, testing::Ready& ready, testing::Gate& gate) {
  return testing::spawn([&, dir] {
    ::setenv(SegmentWriter::kDirEnv, dir.c_str(), 1);
    declare_server("math \"v2\"\\x", "resources_server");
    MeteredSemaphore sem(2, Component::kResourcesServer, "verifiers", "math",
                         std::chrono::milliseconds(1));
    sem.acquire();
    sem.acquire();
    try {
      sem.acquire();
    } catch (const AdmissionTimeout&) {
    }
    std::counting_semaphore<8> limit(8);
    { ResourcesOperation op(limit, Operation::kVerify, Executor::kSubprocess); }
    {
      ResourcesOperation op(limit, Operation::kVerify, Executor::kSubprocess);
      op.set_outcome(Outcome::kTimeout);
    }
    ready.signal();
    gate.wait();
    return 0;
  });
}

// The value of the sample whose line starts with `prefix` (name and labels).
double sample(const std::string& exposition, const std::string& prefix) {
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix + " ", 0) == 0) return std::stod(line.substr(prefix.size() + 1));
  return -1;
}

TEST(ExporterProcess, OnceServesTheWritersSeriesAndPromtoolAcceptsIt) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t w1 = start_writer(tmp.path(), ready, gate);
  pid_t w2 = start_writer(tmp.path(), ready, gate);
  ready.wait(2);
  auto [rc, out] = shell(exporter() + " --once --registry.dir=" + tmp.path() + " 2>/dev/null");
  gate.open();
  testing::wait_exit(w1);
  testing::wait_exit(w2);
  ASSERT_EQ(rc, 0) << out;
  const std::string limit_labels =
      "{nemo_gym_concurrency_component=\"resources_server\",nemo_gym_concurrency_limit_name="
      "\"verifiers\",nemo_gym_server_name=\"math\"}";
  EXPECT_EQ(sample(out, "gym_concurrency_limit" + limit_labels), 4);
  EXPECT_EQ(sample(out, "gym_concurrency_active" + limit_labels), 4);
  EXPECT_EQ(sample(out, "gym_concurrency_available" + limit_labels), 0);
  EXPECT_EQ(sample(out, "gym_concurrency_queue_depth" + limit_labels), 0);
  EXPECT_EQ(sample(out, "gym_concurrency_admission_timeouts_total" + limit_labels), 2);
  EXPECT_EQ(sample(out, "gym_concurrency_admission_cancelled_total" + limit_labels), 0);
  EXPECT_EQ(sample(out, "gym_concurrency_processes" + limit_labels), 2);
  EXPECT_EQ(sample(out, "gym_concurrency_stranded_slots" + limit_labels), 0);
  // Label values with quotes and backslashes are escaped.
  const std::string op =
      "nemo_gym_resources_executor=\"subprocess\",nemo_gym_resources_operation=\"verify\"";
  const std::string server = "nemo_gym_server_name=\"math \\\"v2\\\"\\\\x\"";
  EXPECT_EQ(sample(out, "gym_resources_operation_duration_seconds_count{" + op +
                            ",nemo_gym_resources_operation_outcome=\"timeout\"," + server + "}"),
            2);
  EXPECT_EQ(
      sample(out, "gym_resources_operation_duration_seconds_bucket{" + op +
                      ",nemo_gym_resources_operation_outcome=\"ok\"," + server + ",le=\"+Inf\"}"),
      2);
  EXPECT_EQ(sample(out,
                   "gym_resources_operation_queue_duration_seconds_count{"
                   "nemo_gym_concurrency_wait_outcome=\"admitted\"," +
                       op + "," + server + "}"),
            4);
  EXPECT_EQ(sample(out, "gym_resources_operation_active{" + op + "," + server + "}"), 0);
  EXPECT_EQ(sample(out, "gym_exporter_registry_segments{format_version=\"" +
                            std::to_string(segment::kFormatVersion) + "\"}"),
            2);
  EXPECT_NE(out.find("# HELP gym_concurrency_limit "), std::string::npos);
  EXPECT_NE(out.find("# TYPE gym_resources_operation_duration_seconds histogram"),
            std::string::npos);
  EXPECT_NE(out.find("gym_exporter_build_info{revision="), std::string::npos);
  EXPECT_NE(out.find("process_resident_memory_bytes "), std::string::npos);
  EXPECT_EQ(out.find("gym_server_identity"), std::string::npos) << "internal family not served";

  const std::string file = tmp.sub("exposition.txt");
  std::ofstream(file) << out;
  auto [prc, problems] = shell("promtool check metrics < " + file);
  EXPECT_EQ(prc, 0) << problems;
  EXPECT_EQ(problems, "") << "promtool has nothing to report";
}

// A running exporter on a free port, stopped (SIGTERM) at the end.
class RunningExporter {
 public:
  RunningExporter(const TempDir& tmp, const std::string& extra_flags) : log_(tmp.sub("log.txt")) {
    pid_ = testing::spawn([&] {
      std::string cmd =
          "exec " + exporter() + " --web.listen-address=127.0.0.1:0 " + extra_flags + " 2>" + log_;
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      return 127;
    });
    const std::regex port_re("\\(port ([0-9]+)\\)");
    for (int i = 0; i < 500 && port_ == 0; ++i) {
      std::smatch m;
      std::string log = read_file(log_);
      if (std::regex_search(log, m, port_re))
        port_ = std::stoi(m[1]);
      else
        std::this_thread::sleep_for(10ms);
    }
  }
  ~RunningExporter() { stop(); }
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    status_ = testing::wait_exit(pid_);
    pid_ = -1;
    return status_;
  }
  // SIGKILL: no chance to clean up.
  int kill_hard() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGKILL);
    status_ = testing::wait_exit(pid_);
    pid_ = -1;
    return status_;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_file(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = -1;
};

std::string gunzip(const std::string& in) {
  z_stream zs{};
  inflateInit2(&zs, 15 + 16);
  std::string out(1 << 20, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = uInt(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = uInt(out.size());
  int rc = inflate(&zs, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? zs.total_out : 0);
  inflateEnd(&zs);
  return out;
}

TEST(ExporterProcess, EveryEndpointThroughARealClient) {
  TempDir tmp;
  RunningExporter ex(tmp, "--registry.dir=" + tmp.path());
  ASSERT_GT(ex.port(), 0) << ex.log();
  Response m = http(ex.port(), "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(m.body.find("gym_exporter_build_info"), std::string::npos);
  EXPECT_EQ(m.headers["vary"], "Accept, Accept-Encoding") << "on a plain reply too";
  Response gz = http(ex.port(), "GET", "/metrics", "Accept-Encoding: gzip\r\n");
  EXPECT_EQ(gz.status, 200);
  EXPECT_EQ(gz.headers["content-encoding"], "gzip");
  EXPECT_EQ(gz.headers["vary"], "Accept, Accept-Encoding");
  Response refused = http(ex.port(), "GET", "/metrics", "Accept-Encoding: gzip;q=0\r\n");
  EXPECT_EQ(refused.headers.count("content-encoding"), 0u) << "gzip;q=0 refuses gzip";
  EXPECT_NE(refused.body.find("gym_exporter_build_info"), std::string::npos);
  EXPECT_NE(gunzip(gz.body).find("gym_exporter_build_info"), std::string::npos);
  // name[]: only the families asked for (a histogram also by a sample's name).
  Response some = http(
      ex.port(), "GET",
      "/metrics?name[]=gym_exporter_build_info&name%5B%5D=gym_exporter_scrape_duration_seconds");
  EXPECT_EQ(some.status, 200);
  EXPECT_NE(some.body.find("\ngym_exporter_build_info{"), std::string::npos) << some.body;
  EXPECT_NE(some.body.find("\ngym_exporter_scrape_duration_seconds "), std::string::npos);
  EXPECT_EQ(some.body.find("gym_exporter_http_requests_total"), std::string::npos) << some.body;
  EXPECT_EQ(some.body.find("process_"), std::string::npos);
  Response none = http(ex.port(), "GET", "/metrics?name[]=no_such_family");
  EXPECT_EQ(none.status, 200);
  EXPECT_TRUE(none.body.empty()) << none.body;
  Response head = http(ex.port(), "HEAD", "/metrics");
  EXPECT_EQ(head.status, 200);
  EXPECT_TRUE(head.body.empty());
  Response post = http(ex.port(), "POST", "/metrics");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET, HEAD");
  EXPECT_EQ(http(ex.port(), "GET", "/-/healthy").status, 200);
  EXPECT_EQ(http(ex.port(), "GET", "/-/ready").status, 200);
  Response landing = http(ex.port(), "GET", "/");
  EXPECT_EQ(landing.status, 200);
  EXPECT_NE(landing.body.find("<a href=\"/metrics\">"), std::string::npos);
  EXPECT_NE(landing.body.find(tmp.path()), std::string::npos) << "shows the configuration";
  EXPECT_EQ(http(ex.port(), "GET", "/nope").status, 404);
  Response deaths = http(ex.port(), "GET", "/api/v1/deaths?server=x&reason=signal&since=0");
  EXPECT_EQ(deaths.status, 200);
  EXPECT_EQ(deaths.headers["content-type"], "application/json");
  EXPECT_NE(deaths.body.find("\"deaths\":[]"), std::string::npos) << deaths.body;
  Response bad = http(ex.port(), "GET", "/api/v1/deaths?reason=old_age");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("reason must be"), std::string::npos) << bad.body;
  EXPECT_EQ(http(ex.port(), "GET", "/api/v1/deaths?since=yesterday").status, 400);
  // Each of those requests is counted, by path and status.
  const std::string counted = http(ex.port(), "GET", "/metrics").body;
  auto requests = [&](const char* code, const char* path) {
    return sample(counted, std::string("gym_exporter_http_requests_total{code=\"") + code +
                               "\",path=\"" + path + "\"}");
  };
  EXPECT_EQ(requests("200", "metrics"), 6)
      << "GET, gzip, gzip;q=0, two name[] and HEAD before this scrape";
  EXPECT_EQ(requests("405", "metrics"), 1);
  EXPECT_EQ(requests("200", "healthy"), 1);
  EXPECT_EQ(requests("200", "ready"), 1);
  EXPECT_EQ(requests("200", "landing"), 1);
  EXPECT_EQ(requests("404", "other"), 1) << "an unknown path is `other`, not a new series";
  EXPECT_EQ(requests("200", "snapshot"), 0);
  EXPECT_EQ(requests("200", "deaths"), 1);
  EXPECT_EQ(requests("400", "deaths"), 2);
  // Concurrent scrapes.
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    clients.emplace_back([&] { ok += http(ex.port(), "GET", "/metrics").status == 200; });
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(ex.stop(), 0) << "SIGTERM stops it cleanly";
  EXPECT_NE(ex.log().find("stopping"), std::string::npos);
}

// A connection to the exporter's port that sends nothing, or half a request.
int idle_connection(int port, bool half_sent) {
  const int fd = testing::connect_loopback(port);
  if (fd < 0) return -1;
  const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  if (half_sent) ::send(fd, half.data(), half.size(), 0);
  return fd;
}

TEST(ExporterProcess, AScrapeIsAnsweredBeside500IdleAndHalfSentConnectionsByFewThreads) {
  // Idle and half-sent connections wait in the exporter's one connection
  // thread (http/loop.h), not in a worker each: with CivetWeb's thread per
  // connection a scrape queued behind them (29.5 s with 200 connections and
  // 64 workers), and 1,024 workers were started up front. The client gives
  // up after 5 s; #29's budget is 16 threads at idle.
  TempDir tmp;
  RunningExporter ex(tmp, "--registry.dir=" + tmp.path());
  ASSERT_GT(ex.port(), 0) << ex.log();
  std::vector<int> fds;
  for (int i = 0; i < 500; ++i) fds.push_back(idle_connection(ex.port(), i % 2 == 1));
  EXPECT_EQ(std::count(fds.begin(), fds.end(), -1), 0);
  std::this_thread::sleep_for(200ms);  // every connection accepted and waiting
  const int threads = testing::threads_of(ex.pid());
  EXPECT_GT(threads, 0);
  EXPECT_LE(threads, 16) << "500 waiting connections";
  Response m = http(ex.port(), "GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("gym_exporter_build_info"), std::string::npos);
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  EXPECT_EQ(http(ex.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(ex.stop(), 0) << "stops cleanly with connections just closed";
}

// Lines of `log` that contain every one of `parts`.
int log_lines_with(const std::string& log, std::initializer_list<std::string> parts) {
  std::istringstream in(log);
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    n += std::all_of(parts.begin(), parts.end(),
                     [&](const std::string& p) { return line.find(p) != std::string::npos; });
  return n;
}

// Two uvicorn-like workers of one server, each with its own 4 slots of one
// limit: one has all its slots taken and a caller queued, the other none.
TEST(ExporterProcess, FreeSlotsOfOneWorkerBesideAnothersQueueAreServedAsStranded) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  auto worker = [&](int holds, bool queue) {
    return testing::spawn([&, holds, queue] {
      SegmentWriter w(tmp.path());
      MeteredSemaphore sem(4, Component::kResourcesServer, "verifiers", "math", std::nullopt, w);
      for (int i = 0; i < holds; ++i) sem.acquire();
      std::jthread waiter;
      if (queue) waiter = std::jthread([&sem] { sem.acquire(); });
      while (sem.queued() != (queue ? 1 : 0)) std::this_thread::sleep_for(1ms);
      ready.signal();
      gate.wait();
      for (int i = 0; i < holds; ++i) sem.release();
      return 0;  // the waiter's slot goes with the process
    });
  };
  const pid_t busy = worker(4, true);
  const pid_t idle = worker(1, false);
  ready.wait(2);
  auto [rc, out] = shell(exporter() + " --once --registry.dir=" + tmp.path() + " 2>/dev/null");
  gate.open();
  EXPECT_EQ(testing::wait_exit(busy), 0);
  EXPECT_EQ(testing::wait_exit(idle), 0);
  ASSERT_EQ(rc, 0) << out;
  const std::string labels =
      "{nemo_gym_concurrency_component=\"resources_server\",nemo_gym_concurrency_limit_name="
      "\"verifiers\",nemo_gym_server_name=\"math\"}";
  // Summed, a free slot beside a queue; spread, where they are.
  EXPECT_EQ(sample(out, "gym_concurrency_limit" + labels), 8);
  EXPECT_EQ(sample(out, "gym_concurrency_available" + labels), 3);
  EXPECT_EQ(sample(out, "gym_concurrency_queue_depth" + labels), 1);
  EXPECT_EQ(sample(out, "gym_concurrency_processes" + labels), 2);
  EXPECT_EQ(sample(out, "gym_concurrency_stranded_slots" + labels), 3);
}

TEST(ExporterProcess, DebugLogsWritersAndServersAsTheyComeAndGoWithFields) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  const pid_t writer = start_writer(tmp.path(), ready, gate);
  ready.wait(1);
  RunningExporter ex(tmp, "--registry.dir=" + tmp.path() + " --log.level=debug --log.format=json");
  ASSERT_GT(ex.port(), 0) << ex.log();
  EXPECT_EQ(http(ex.port(), "GET", "/metrics").status, 200);
  ::kill(writer, SIGKILL);
  testing::wait_exit(writer);
  EXPECT_EQ(http(ex.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(ex.stop(), 0);
  const std::string log = ex.log();
  const std::string pid = "\"pid\":\"" + std::to_string(writer) + "\"";
  EXPECT_EQ(log_lines_with(log, {"\"msg\":\"registry: writer appeared\"", pid}), 1) << log;
  EXPECT_EQ(log_lines_with(log, {"\"msg\":\"registry: writer gone\"", pid}), 1) << log;
  EXPECT_EQ(log_lines_with(log, {"\"msg\":\"registry: server declared\"",
                                 "\"server\":\"math \\\"v2\\\"\\\\x\"", pid}),
            1)
      << "fields are JSON strings, escaped\n"
      << log;
  EXPECT_GE(log_lines_with(log, {"\"msg\":\"memory sample\"", "\"took_seconds\":"}), 1);
  EXPECT_EQ(log_lines_with(log, {"listening on", "\"tls\":\"false\"", "\"port\":\""}), 1)
      << "whether TLS is on";
  // Every line is one JSON object.
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.front(), '{') << line;
    EXPECT_EQ(line.back(), '}') << line;
  }
}

TEST(ExporterProcess, LogfmtFieldsAreKeyValuePairsQuotedWhenNeeded) {
  TempDir tmp;
  RunningExporter ex(tmp, "--registry.dir=" + tmp.path() + " --log.level=debug");
  ASSERT_GT(ex.port(), 0) << ex.log();
  EXPECT_EQ(ex.stop(), 0);
  const std::string log = ex.log();
  EXPECT_EQ(log_lines_with(log, {"level=info", "listening on", " tls=false",
                                 " port=" + std::to_string(ex.port())}),
            1)
      << log;
  EXPECT_GE(log_lines_with(log, {"msg=\"memory sample\"", " pss=read"}), 1) << log;
}

TEST(ExporterProcess, ADisabledCollectorServesNothingAndTheOthersStay) {
  TempDir tmp;
  const std::string cfg = tmp.sub("gym.yml");
  std::ofstream(cfg) << "memory:\n  enabled: false\n";
  auto [rc, out] =
      shell(exporter() + " --once --config.file=" + cfg + " --registry.dir=" + tmp.sub("r"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("gym_host_memory"), std::string::npos);
  EXPECT_EQ(out.find("gym_exporter_memory_sample"), std::string::npos);
  EXPECT_NE(out.find("gym_exporter_build_info"), std::string::npos);
  EXPECT_NE(out.find("gym_exporter_registry_segments"), std::string::npos);
  std::ofstream(cfg) << "memory:\n  enabled: perhaps\n";
  auto [bad_rc, bad_out] = shell(exporter() + " --check-config --config.file=" + cfg);
  EXPECT_NE(bad_rc, 0);
  EXPECT_NE(bad_out.find("memory.enabled"), std::string::npos) << bad_out;
}

TEST(ExporterProcess, TheCpuAndCgroupCollectorsAreTurnedOffApartFromMemory) {
  TempDir tmp;
  const std::string cfg = tmp.sub("gym.yml");
  const std::string target = "memory:\n  targets:\n    - {name: me, server_type: agent, pid: " +
                             std::to_string(::getpid()) + "}\n";
  std::ofstream(cfg) << target;
  auto [rc, out] =
      shell(exporter() + " --once --config.file=" + cfg + " --registry.dir=" + tmp.sub("r"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("gym_server_cpu_seconds_total{"), std::string::npos) << out;
  EXPECT_NE(out.find("gym_exporter_cgroup_sample_errors_total"), std::string::npos) << out;
  std::ofstream(cfg) << target << "cpu:\n  enabled: false\ncgroup:\n  enabled: false\n";
  auto [off_rc, off] =
      shell(exporter() + " --once --config.file=" + cfg + " --registry.dir=" + tmp.sub("r"));
  EXPECT_EQ(off_rc, 0) << off;
  EXPECT_NE(off.find("gym_server_memory_usage_bytes{"), std::string::npos) << off;
  EXPECT_EQ(off.find("gym_server_cpu_seconds_total"), std::string::npos);
  EXPECT_EQ(off.find("gym_server_threads"), std::string::npos);
  EXPECT_EQ(off.find("gym_exporter_cgroup_sample_errors_total"), std::string::npos);
}

TEST(ExporterProcess, PortInUseIsAOneLineErrorAndNonZeroExit) {
  TempDir tmp;
  RunningExporter first(tmp, "--registry.dir=" + tmp.path());
  ASSERT_GT(first.port(), 0);
  // Another directory: a second exporter on the same one is refused first.
  auto [rc, out] = shell(exporter() + " --registry.dir=" + tmp.sub("other") +
                         " --web.listen-address=127.0.0.1:" + std::to_string(first.port()));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot listen on 127.0.0.1:" + std::to_string(first.port())),
            std::string::npos)
      << out;
  // One line that is not information (the gpu collector says at info level
  // that this host has no NVIDIA driver).
  size_t lines = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    lines += line.find("level=info") == std::string::npos;
  EXPECT_EQ(lines, 1u) << out;
}

TEST(ExporterProcess, CheckConfigValidatesAndReportsEachError) {
  TempDir tmp;
  const std::string good = tmp.sub("good.yml");
  const std::string bad = tmp.sub("bad.yml");
  std::ofstream(good) << "registry:\n  dir: /tmp/x\n";
  std::ofstream(bad) << "registry:\n  dri: /tmp/x\nlog:\n  level: loud\n";
  auto [ok_rc, ok_out] = shell(exporter() + " --check-config --config.file=" + good);
  EXPECT_EQ(ok_rc, 0) << ok_out;
  auto [bad_rc, bad_out] = shell(exporter() + " --check-config --config.file=" + bad);
  EXPECT_NE(bad_rc, 0);
  EXPECT_NE(bad_out.find("bad.yml:2:3: unknown key 'registry.dri'"), std::string::npos) << bad_out;
  auto [flag_rc, flag_out] = shell(exporter() + " --check-config --log.level=loud");
  EXPECT_NE(flag_rc, 0);
  EXPECT_NE(flag_out.find("log level"), std::string::npos);
  auto [unk_rc, unk_out] = shell(exporter() + " --bogus");
  EXPECT_EQ(unk_rc, 2);
  EXPECT_NE(unk_out.find("unknown flag --bogus"), std::string::npos);
  auto [v_rc, v_out] = shell(exporter() + " --version");
  EXPECT_EQ(v_rc, 0);
  EXPECT_NE(v_out.find("gym-exporter version"), std::string::npos);
}

TEST(ExporterProcess, RefusesARegistryAnyoneMayWriteToUnlessSticky) {
  TempDir tmp;
  const std::string dir = tmp.sub("open");
  ASSERT_EQ(::mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto [rc, out] = shell(exporter() + " --once --registry.dir=" + dir);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("is writable by anyone and has no sticky bit"), std::string::npos) << out;
  ASSERT_EQ(::chmod(dir.c_str(), 01777), 0);
  auto [sticky_rc, sticky_out] = shell(exporter() + " --once --registry.dir=" + dir);
  EXPECT_EQ(sticky_rc, 0) << sticky_out;
}

TEST(ExporterProcess, SighupReloadsAGoodFileAndKeepsTheRunningConfigOnABadOne) {
  TempDir tmp;
  const std::string cfg = tmp.sub("gym.yml");
  const std::string dir_a = tmp.sub("a");
  const std::string dir_b = tmp.sub("b");
  std::ofstream(cfg) << "registry:\n  dir: " << dir_a << "\n";
  {
    SegmentWriter wb(dir_b);
    wb.counter("gym_concurrency_admission_cancelled_total",
               std::vector<Label>{{"nemo_gym_concurrency_component", "other"},
                                  {"nemo_gym_concurrency_limit_name", "b"}})
        .add(5);
    RunningExporter ex(tmp, "--config.file=" + cfg);
    ASSERT_GT(ex.port(), 0) << ex.log();
    EXPECT_EQ(http(ex.port(), "GET", "/metrics").body.find("limit_name=\"b\""), std::string::npos);

    std::ofstream(cfg) << "registry:\n  dir: " << dir_b << "\n";
    ::kill(ex.pid(), SIGHUP);
    // The new registry shows before the reload is counted (the count follows
    // the switch): wait for both.
    bool switched = false;
    std::string out;
    for (int i = 0; i < 300 && !switched; ++i) {
      out = http(ex.port(), "GET", "/metrics").body;
      switched = out.find("limit_name=\"b\"") != std::string::npos &&
                 sample(out, "gym_exporter_config_reloads_total{result=\"success\"}") == 1;
      if (!switched) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(switched) << ex.log();
    out = http(ex.port(), "GET", "/metrics").body;
    EXPECT_EQ(sample(out, "gym_exporter_config_reloads_total{result=\"success\"}"), 1);
    EXPECT_EQ(sample(out, "gym_exporter_config_last_reload_successful"), 1);

    std::ofstream(cfg) << "registry: [broken\n";
    ::kill(ex.pid(), SIGHUP);
    bool logged = false;
    for (int i = 0; i < 300 && !logged; ++i) {
      logged = ex.log().find("reload failed") != std::string::npos;
      if (!logged) std::this_thread::sleep_for(10ms);
    }
    EXPECT_TRUE(logged) << ex.log();
    out = http(ex.port(), "GET", "/metrics").body;
    EXPECT_NE(out.find("limit_name=\"b\""), std::string::npos)
        << "the running configuration is kept";
    EXPECT_EQ(sample(out, "gym_exporter_config_reloads_total{result=\"failure\"}"), 1);
    EXPECT_EQ(sample(out, "gym_exporter_config_reloads_total{result=\"success\"}"), 1);
    EXPECT_EQ(sample(out, "gym_exporter_config_last_reload_successful"), 0);
    EXPECT_EQ(ex.stop(), 0);
  }
}

// ---------------------------------------------------------------- registry trust

// A writer process that counts `n` admission timeouts of limit `name` and
// exits.
void count_timeouts_and_exit(const std::string& dir, const char* name, int n) {
  pid_t pid = testing::spawn([&] {
    SegmentWriter w(dir);
    LimitMeter m(2, Component::kOther, name, std::nullopt, true, w);
    for (int i = 0; i < n; ++i) m.wait_failed(m.wait_started(), gym::WaitOutcome::kTimeout);
    return 0;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
}

std::string timeouts_of(const char* name) {
  return std::string("gym_concurrency_admission_timeouts_total{nemo_gym_concurrency_component=") +
         "\"other\",nemo_gym_concurrency_limit_name=\"" + name + "\"}";
}

size_t segment_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().ends_with(".seg");
  return n;
}

std::string config_with_slow_sampler(const TempDir& tmp) {
  const std::string file = tmp.sub("config.yml");
  std::ofstream(file) << "registry:\n  dir: " << tmp.path()
                      << "\nmemory:\n  interval_seconds: 3600\n";
  return file;
}

TEST(ExporterProcess, SecondExporterOnADirectoryRefusesNamingTheFirstsPid) {
  TempDir tmp;
  RunningExporter first(tmp, "--registry.dir=" + tmp.path());
  ASSERT_GT(first.port(), 0);
  auto [rc, out] = shell(exporter() + " --registry.dir=" + tmp.path() +
                         " --web.listen-address=127.0.0.1:0 2>&1");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("another gym-exporter (pid " + std::to_string(first.pid()) + ")"),
            std::string::npos)
      << out;
  // One line that is not information (the gpu collector says at info level
  // that this host has no NVIDIA driver).
  size_t lines = 0;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    lines += line.find("level=info") == std::string::npos;
  EXPECT_EQ(lines, 1u) << out;
}

TEST(ExporterProcess, OnceBesideARunningExporterReadsWithoutRetiringAnything) {
  TempDir tmp;
  RunningExporter first(tmp, "--config.file=" + config_with_slow_sampler(tmp));
  ASSERT_GT(first.port(), 0);
  count_timeouts_and_exit(tmp.path(), "early", 11);
  EXPECT_EQ(sample(http(first.port(), "GET", "/metrics").body, timeouts_of("early")), 11);
  EXPECT_EQ(segment_files(tmp.path()), 0u) << "the running exporter retired it";
  count_timeouts_and_exit(tmp.path(), "late", 5);
  auto [rc, out] = shell(exporter() + " --once --registry.dir=" + tmp.path() + " 2>/dev/null");
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(sample(out, "gym_exporter_registry_retiring"), 0);
  EXPECT_EQ(sample(out, timeouts_of("early")), 11) << "from the running exporter's totals";
  EXPECT_EQ(sample(out, timeouts_of("late")), 5) << "a dead writer not yet folded";
  EXPECT_EQ(segment_files(tmp.path()), 1u) << "--once removed nothing";
  const std::string body = http(first.port(), "GET", "/metrics").body;
  EXPECT_EQ(sample(body, timeouts_of("late")), 5) << "the running exporter still sees it";
  EXPECT_EQ(sample(body, "gym_exporter_registry_retiring"), 1);
}

TEST(ExporterProcess, CountersNeverFallAcrossRestartsWithSigkillAndSigterm) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t live = testing::spawn([&] {
    SegmentWriter w(tmp.path());
    LimitMeter m(2, Component::kOther, "work", std::nullopt, true, w);
    for (int i = 0; i < 7; ++i) m.wait_failed(m.wait_started(), gym::WaitOutcome::kTimeout);
    ready.signal();
    gate.wait();
    return 0;
  });
  ready.wait(1);
  for (int i = 0; i < 5; ++i) count_timeouts_and_exit(tmp.path(), "work", 100);
  const std::string flags = "--registry.dir=" + tmp.path();
  double before = 0;
  {
    RunningExporter a(tmp, flags);
    ASSERT_GT(a.port(), 0);
    before = sample(http(a.port(), "GET", "/metrics").body, timeouts_of("work"));
    EXPECT_EQ(before, 507);
    EXPECT_EQ(a.kill_hard(), 128 + SIGKILL);
  }
  count_timeouts_and_exit(tmp.path(), "work", 100);  // while no exporter runs
  std::filesystem::remove(tmp.sub("log.txt"));       // so the next one's port is read
  {
    RunningExporter b(tmp, flags);
    ASSERT_GT(b.port(), 0);
    EXPECT_EQ(sample(http(b.port(), "GET", "/metrics").body, timeouts_of("work")), 607)
        << "after SIGKILL: the folded totals were kept, nothing counted twice";
    EXPECT_EQ(b.stop(), 0);
  }
  std::filesystem::remove(tmp.sub("log.txt"));
  RunningExporter c(tmp, flags);
  ASSERT_GT(c.port(), 0);
  EXPECT_EQ(sample(http(c.port(), "GET", "/metrics").body, timeouts_of("work")), 607)
      << "after SIGTERM";
  gate.open();
  EXPECT_EQ(testing::wait_exit(live), 0);
}

TEST(ExporterProcess, ServerNameThatIsNotUtf8ThroughTheCAbiLeavesTheExpositionValid) {
  TempDir tmp;
  testing::Ready ready;
  testing::Gate gate;
  pid_t pid = testing::spawn([&] {
    ::setenv("GYM_METRICS_DIR", tmp.path().c_str(), 1);
    gym_limit* bad = nullptr;
    gym_limit* good = nullptr;
    if (gym_limit_open("resources_server", "verifiers", "caf\xe9", 2, -1, &bad) != GYM_OK) return 2;
    if (gym_limit_open("resources_server", "verifiers", "cafe", 2, -1, &good) != GYM_OK) return 3;
    // The unmetered limit still works for its caller.
    if (gym_limit_acquired(bad) != GYM_OK || gym_limit_active(bad) != 1) return 4;
    if (gym_limit_acquired(good) != GYM_OK) return 5;
    ready.signal();
    gate.wait();
    gym_limit_close(bad);
    gym_limit_close(good);
    return 0;
  });
  ready.wait(1);
  auto [rc, out] = shell(exporter() + " --once --registry.dir=" + tmp.path() + " 2>/dev/null");
  gate.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(sample(out, "gym_exporter_registry_dropped_series_total"), 7)
      << "limit, available, queue depth, the holds' and waits' ages, cancellations and hold "
         "time of the bad name (nobody waited: no wait histogram registers)";
  EXPECT_EQ(sample(out,
                   "gym_concurrency_active{nemo_gym_concurrency_component="
                   "\"resources_server\",nemo_gym_concurrency_limit_name=\"verifiers\","
                   "nemo_gym_server_name=\"cafe\"}"),
            1);
  const std::string file = tmp.sub("exposition.txt");
  std::ofstream(file) << out;
  auto [prc, problems] = shell("promtool check metrics < " + file);
  EXPECT_EQ(prc, 0) << problems;
}

TEST(ExporterProcess, AnOverlongPortIsAnErrorNotAnAbort) {
  auto [rc, out] =
      shell(exporter() + " --check-config --web.listen-address=:99999999999999999999 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("listen address must be [host]:port"), std::string::npos) << out;
}

// gym-demo forks verifier subprocesses while its resources servers hold
// slots: every limit is still reported at its configured size.
TEST(ExporterProcess, GymDemoLimitsAreReportedAsConfiguredDespiteForks) {
  TempDir tmp;
  pid_t demo = testing::spawn([&] {
    const std::string dir = "--registry.dir=" + tmp.path();
    ::execl(GYM_DEMO_BIN, GYM_DEMO_BIN, dir.c_str(), "--duration=300", nullptr);
    return 127;
  });
  const std::string c = "nemo_gym_concurrency_component=";
  const std::string n = ",nemo_gym_concurrency_limit_name=";
  const std::string s = ",nemo_gym_server_name=";
  const std::vector<std::pair<std::string, double>> limits = {
      {"{" + c + "\"rollout_driver\"" + n + "\"rollouts\"}", 16},
      {"{" + c + "\"agent_server\"" + n + "\"upstream_requests\"" + s + "\"simple_agent\"}", 8},
      {"{" + c + "\"model_server\"" + n + "\"inference_requests\"" + s + "\"policy_model\"}", 32},
      {"{" + c + "\"resources_server\"" + n + "\"verifiers\"" + s + "\"math_verifier\"}", 4},
      {"{" + c + "\"resources_server\"" + n + "\"verifiers\"" + s + "\"code_sandbox\"}", 8},
  };
  // The demo's servers have started once every limit shows (a sanitized
  // build on a loaded machine takes seconds); from then on every round must
  // show each at its size.
  auto once = [&] {
    return shell(exporter() + " --once --registry.dir=" + tmp.path() + " 2>/dev/null");
  };
  bool started = false;
  std::string first;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!started && std::chrono::steady_clock::now() < deadline) {
    first = once().second;
    started = true;
    for (const auto& [labels, limit] : limits)
      started = started && sample(first, "gym_concurrency_limit" + labels) == limit;
    if (!started) std::this_thread::sleep_for(250ms);
  }
  ASSERT_TRUE(started) << first;
  for (int round = 0; round < 5; ++round) {
    auto [rc, out] = once();
    ASSERT_EQ(rc, 0);
    for (const auto& [labels, limit] : limits) {
      EXPECT_EQ(sample(out, "gym_concurrency_limit" + labels), limit)
          << labels << " in round " << round << ":\n"
          << out.substr(0, 3000);
      const double active = sample(out, "gym_concurrency_active" + labels);
      EXPECT_GE(active, 0) << labels;
      EXPECT_LE(active, limit) << labels;
    }
    std::this_thread::sleep_for(300ms);
  }
  ::kill(demo, SIGTERM);
  EXPECT_EQ(testing::wait_exit(demo), 0);
}

}  // namespace
}  // namespace gym
