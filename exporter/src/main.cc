// gym-exporter: parses the flags, loads the configuration, starts the App
// (app.h) and turns signals into its reload() (SIGHUP) and stop() (SIGTERM,
// SIGINT).
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "app.h"
#include "build_info.h"
#include "logging.h"

namespace gym::exporter {
namespace {

// Each scrape builds its exposition (megabytes for large registries) on one
// of the HTTP worker threads. With glibc's defaults every worker thread gets
// its own arena, and the dynamic mmap threshold soon keeps such buffers in
// them: resident memory grows with the number of workers. A fixed threshold
// returns large buffers to the kernel when freed; few arenas suffice here.
void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_ARENA_MAX, 2);
}

// Every connection is a descriptor beside the registry's segments: raise the
// soft limit to the hard one (as Go programs do at start), so that
// web.max_connections connections and thousands of segments fit together.
void raise_open_files_limit() {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur >= nofile.rlim_max) return;
  nofile.rlim_cur = nofile.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &nofile) != 0)
    spdlog::warn("cannot raise the open files limit: {}", std::strerror(errno));
}

int serve(const Flags& flags, const Loaded& loaded) {
  raise_open_files_limit();
  // Signals go to the main thread's sigwait, never to server threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::string error;
  std::unique_ptr<App> app = App::start(flags, loaded, &error);
  if (!app) {
    spdlog::error("{}", error);
    return 1;
  }
  for (;;) {
    int sig = 0;
    if (sigwait(&signals, &sig) != 0) continue;
    if (sig == SIGHUP) {
      app->reload();
      continue;
    }
    spdlog::info("received signal {}, stopping", strsignal(sig));
    break;
  }
  app->stop();
  return 0;
}

int run(int argc, char** argv) {
  tune_malloc();
  Flags flags;
  std::string error;
  if (!parse_flags(argc, argv, flags, error)) {
    std::fprintf(stderr, "gym-exporter: %s\n", error.c_str());
    return 2;
  }
  if (flags.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (flags.version) {
    std::printf("gym-exporter version %s (revision %s)\n", kVersion, kRevision);
    return 0;
  }
  const Loaded loaded = load(flags);
  if (!loaded.ok()) {
    for (const auto& e : loaded.errors()) std::fprintf(stderr, "gym-exporter: %s\n", e.c_str());
    return 1;
  }
  if (flags.check_config) {
    for (const auto& d : loaded.config.deprecations)
      std::fprintf(stderr, "gym-exporter: %s\n", d.c_str());
    std::printf("configuration OK\n");
    return 0;
  }
  const Config& config = loaded.config.config;
  setup_logging(config.log_level, config.log_format);
  warn_deprecations(loaded.config);
  return flags.once ? print_once(loaded) : serve(flags, loaded);
}

}  // namespace
}  // namespace gym::exporter

int main(int argc, char** argv) {
  return gym::exporter::run(argc, argv);
}
