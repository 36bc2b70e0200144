// gym-exporter: wires the configuration, the collectors and the HTTP server
// together, and handles signals (SIGHUP reloads, SIGTERM and SIGINT stop).
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>

#include "config.h"
#include "exposition.h"
#include "http_server.h"
#include "logging.h"
#include "memory_sampler.h"
#include "web_config.h"

namespace gym::exporter {
namespace {

const char* kUsage = R"(usage: gym-exporter [flags]

Serves the NeMo Gym metrics registry of this host to Prometheus.

Flags:
  --web.listen-address=ADDR   address to listen on ([host]:port, default ":9478")
  --web.telemetry-path=PATH   path under which to expose metrics (default "/metrics")
  --config.file=FILE          YAML configuration (see config/gym-exporter.yml)
  --web.config.file=FILE      TLS and basic auth, in exporter-toolkit's format
  --registry.dir=DIR          registry directory (default "/dev/shm/gym-metrics")
  --log.level=LEVEL           debug, info, warn or error (default "info")
  --log.format=FORMAT         logfmt or json (default "logfmt")
  --check-config              validate the configuration and exit (0 valid)
  --once                      print one exposition to standard output and exit
  --version                   print the version and exit
  --help                      print this help and exit

Flags override the configuration file, also after a reload (SIGHUP).
)";

struct Flags {
  ConfigOverrides overrides;
  std::string config_file;
  std::string web_config_file;
  bool check_config = false;
  bool once = false;
};

// Parses --name=value and --name value. Returns false with a message.
bool parse_flags(int argc, char** argv, Flags& flags, std::string& error, bool& exit_now) {
  exit_now = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      exit_now = true;
      return true;
    }
    if (arg == "--version") {
      std::printf("gym-exporter version %s (revision %s)\n", kVersion, kRevision);
      exit_now = true;
      return true;
    }
    if (arg == "--check-config") {
      flags.check_config = true;
      continue;
    }
    if (arg == "--once") {
      flags.once = true;
      continue;
    }
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take = [&](std::optional<std::string>* into, std::string* plain) {
      if (!has_value) {
        if (i + 1 >= argc) {
          error = "flag " + name + " needs a value";
          return false;
        }
        value = argv[++i];
      }
      if (into) *into = value;
      if (plain) *plain = value;
      return true;
    };
    bool ok = true;
    if (name == "--web.listen-address")
      ok = take(&flags.overrides.listen_address, nullptr);
    else if (name == "--web.telemetry-path")
      ok = take(&flags.overrides.telemetry_path, nullptr);
    else if (name == "--registry.dir")
      ok = take(&flags.overrides.registry_dir, nullptr);
    else if (name == "--log.level")
      ok = take(&flags.overrides.log_level, nullptr);
    else if (name == "--log.format")
      ok = take(&flags.overrides.log_format, nullptr);
    else if (name == "--config.file")
      ok = take(nullptr, &flags.config_file);
    else if (name == "--web.config.file")
      ok = take(nullptr, &flags.web_config_file);
    else {
      error = "unknown flag " + name + " (see --help)";
      return false;
    }
    if (!ok) return false;
  }
  return true;
}

ConfigResult effective_config(const Flags& flags) {
  ConfigResult r;
  if (!flags.config_file.empty()) r = load_config_file(flags.config_file);
  if (!r.ok()) return r;
  flags.overrides.apply(r.config);
  r.errors = validate(r.config, flags.config_file.empty() ? "flags" : flags.config_file);
  if (std::string problem = registry_dir_problem(r.config.registry_dir); !problem.empty())
    r.errors.push_back(problem);
  return r;
}

WebConfigResult effective_web_config(const Flags& flags) {
  if (flags.web_config_file.empty()) return {};
  return load_web_config_file(flags.web_config_file);
}

// The collectors for `c` over `registry`. The memory sampler is returned too
// (owned by the list), not yet started.
std::vector<std::unique_ptr<Collector>> make_collectors(const Config& c,
                                                        std::shared_ptr<SharedRegistry> registry,
                                                        MemorySampler** sampler) {
  std::vector<std::unique_ptr<Collector>> out;
  out.push_back(std::make_unique<RegistryCollector>(
      registry, [](const std::string& problem) { spdlog::warn("registry: {}", problem); }));
  auto memory = std::make_unique<MemorySampler>(
      c.memory, registry, [](const std::string& problem) { spdlog::warn("{}", problem); });
  *sampler = memory.get();
  out.push_back(std::move(memory));
  out.push_back(std::make_unique<BuildInfoCollector>());
  out.push_back(std::make_unique<ProcessCollector>());
  return out;
}

ReaderOptions reader_options(const Config& c) {
  ReaderOptions o;
  o.trusted_uids.assign(c.trusted_uids.begin(), c.trusted_uids.end());
  o.retired_series_ttl =
      std::chrono::milliseconds(static_cast<int64_t>(c.retired_series_ttl_seconds * 1000));
  o.max_series = static_cast<size_t>(c.max_series);
  return o;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string landing_page(const Config& c, const std::string& config_file) {
  const std::string path = html_escape(c.telemetry_path);
  return "<!DOCTYPE html>\n<html><head><title>gym-exporter</title></head><body>\n"
         "<h1>gym-exporter</h1>\n<p>Version " +
         html_escape(kVersion) + " (revision " + html_escape(kRevision) +
         ")</p>\n<ul>\n<li><a href=\"" + path + "\">" + path +
         "</a></li>\n<li><a href=\"/-/healthy\">/-/healthy</a></li>\n"
         "<li><a href=\"/-/ready\">/-/ready</a></li>\n</ul>\n"
         "<h2>Configuration in effect</h2>\n<pre>\n"
         "config file:      " +
         html_escape(config_file.empty() ? "(none)" : config_file) +
         "\nlisten address:   " + html_escape(c.listen_address) + "\ntelemetry path:   " + path +
         "\nregistry dir:     " + html_escape(c.registry_dir) +
         "\nlog:              " + html_escape(c.log_level + " " + c.log_format) +
         "\n</pre>\n</body></html>\n";
}

// Each scrape builds its exposition (megabytes for large registries) on one
// of the HTTP worker threads. With glibc's defaults every worker thread gets
// its own arena, and the dynamic mmap threshold soon keeps such buffers in
// them: resident memory grows with the number of workers. A fixed threshold
// returns large buffers to the kernel when freed; few arenas suffice here.
void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 2);
}

int run(int argc, char** argv) {
  tune_malloc();
  Flags flags;
  std::string error;
  bool exit_now = false;
  if (!parse_flags(argc, argv, flags, error, exit_now)) {
    std::fprintf(stderr, "gym-exporter: %s\n", error.c_str());
    return 2;
  }
  if (exit_now) return 0;
  ConfigResult loaded = effective_config(flags);
  WebConfigResult web = effective_web_config(flags);
  for (const auto& e : web.errors) loaded.errors.push_back(e);
  if (!loaded.ok()) {
    for (const auto& e : loaded.errors) std::fprintf(stderr, "gym-exporter: %s\n", e.c_str());
    return 1;
  }
  if (flags.check_config) {
    std::printf("configuration OK\n");
    return 0;
  }
  Config config = loaded.config;
  setup_logging(config.log_level, config.log_format);
  auto registry = std::make_shared<SharedRegistry>(config.registry_dir, reader_options(config));
  // One retiring reader per directory. --once beside a running exporter
  // reads without retiring anything (its first snapshot finds the lock held).
  if (!flags.once) {
    std::string why;
    if (!registry->with([&](RegistryReader& r) { return r.claim(&why); })) {
      std::fprintf(stderr, "gym-exporter: %s\n", why.c_str());
      return 1;
    }
  }
  MemorySampler* sampler = nullptr;
  Exposition exposition(make_collectors(config, registry, &sampler));
  if (flags.once) {
    sampler->sample_once();
    std::cout << exposition.render() << std::flush;
    return 0;
  }

  // Signals go to the main thread's sigwait, never to server threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::mutex page_mu;
  std::string page = landing_page(config, flags.config_file);
  HttpServer::Options http{config.listen_address, config.telemetry_path, config.max_connections,
                           web.config};
  auto server = HttpServer::start(
      http, exposition,
      [&] {
        std::lock_guard<std::mutex> lock(page_mu);
        return page;
      },
      &error);
  if (!server) {
    spdlog::error("{}", error);
    return 1;
  }
  sampler->start();
  spdlog::info("gym-exporter {} listening on {} (port {}), telemetry path {}, registry {}",
               kVersion, config.listen_address, server->port(), config.telemetry_path,
               config.registry_dir);
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      WebConfigResult next_web = effective_web_config(flags);
      if (!next_web.ok()) {
        for (const auto& e : next_web.errors)
          spdlog::error("reload failed, keeping the running configuration: {}", e);
        continue;
      }
      if (next_web.config.tls != web.config.tls ||
          next_web.config.cert_file != web.config.cert_file ||
          next_web.config.key_file != web.config.key_file ||
          next_web.config.client_auth_type != web.config.client_auth_type ||
          next_web.config.client_ca_file != web.config.client_ca_file ||
          next_web.config.min_version != web.config.min_version)
        spdlog::warn("reload: TLS settings change only at restart");
      server->set_basic_auth_users(next_web.config.basic_auth_users);
      web.config.basic_auth_users = next_web.config.basic_auth_users;
      ConfigResult r = effective_config(flags);
      if (!r.ok()) {
        for (const auto& e : r.errors)
          spdlog::error("reload failed, keeping the running configuration: {}", e);
        continue;
      }
      Config next = r.config;
      if (next.listen_address != config.listen_address ||
          next.telemetry_path != config.telemetry_path ||
          next.max_connections != config.max_connections) {
        spdlog::warn("reload: web settings change only at restart; keeping {} {}",
                     config.listen_address, config.telemetry_path);
        next.listen_address = config.listen_address;
        next.telemetry_path = config.telemetry_path;
        next.max_connections = config.max_connections;
      }
      setup_logging(next.log_level, next.log_format);
      const bool reader_changed =
          next.registry_dir != config.registry_dir || next.trusted_uids != config.trusted_uids ||
          next.retired_series_ttl_seconds != config.retired_series_ttl_seconds ||
          next.max_series != config.max_series;
      if (reader_changed || !(next.memory == config.memory)) {
        // A new directory needs a new reader; otherwise keep it, so that the
        // totals of retired writers survive the reload.
        // The new reader takes the directory's lock at its first snapshot,
        // once the old collectors (and so the old reader) are gone, and
        // reloads the totals file: nothing folded is lost.
        if (reader_changed)
          registry = std::make_shared<SharedRegistry>(next.registry_dir, reader_options(next));
        MemorySampler* next_sampler = nullptr;
        auto collectors = make_collectors(next, registry, &next_sampler);
        exposition.replace(std::move(collectors));  // stops the old sampler
        next_sampler->start();
        sampler = next_sampler;
      }
      config = next;
      {
        std::lock_guard<std::mutex> lock(page_mu);
        page = landing_page(config, flags.config_file);
      }
      spdlog::info("configuration reloaded from {}",
                   flags.config_file.empty() ? "flags" : flags.config_file);
      continue;
    }
    spdlog::info("received signal {}, stopping", strsignal(sig));
    break;
  }
  server.reset();
  sampler->stop();  // the final sample
  return 0;
}

}  // namespace
}  // namespace gym::exporter

int main(int argc, char** argv) {
  return gym::exporter::run(argc, argv);
}
