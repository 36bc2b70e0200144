// gym-demo: a synthetic Gym host, as separate processes writing through
// libgymmetrics: a rollout driver, an agent, a model server and two resources
// servers with declared identities; limits with and without admission
// timeouts, some too small so that queues build; operations of every kind,
// executor and outcome; verifier subprocesses that allocate and free memory;
// and an asyncio server's runtime, simulated (llm_judge: its event loop's
// probe, a synchronous verifier that blocks the loop now and then, tasks,
// garbage collections), as gym_metrics.instrument_runtime reports it.
//
//   gym-demo [--registry.dir=DIR] [--duration=SECONDS]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "gym/runtime_meter.h"
#include "gym/server_identity.h"

namespace {

using namespace std::chrono_literals;
using gym::Component;
using gym::Executor;
using gym::Operation;
using gym::Outcome;

std::atomic<bool> g_stop{false};

void sleep_ms(std::mt19937& rng, int lo, int hi) {
  std::this_thread::sleep_for(std::chrono::milliseconds(lo + int(rng() % unsigned(hi - lo + 1))));
}

// Workers that take a slot of `sem` for a while, some giving up at the
// admission timeout.
void run_limit_workers(gym::MeteredSemaphore& sem, int workers, int hold_lo, int hold_hi) {
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(unsigned(w * 7919 + ::getpid()));
      while (!g_stop) {
        try {
          gym::SemaphoreGuard slot(sem);
          sleep_ms(rng, hold_lo, hold_hi);
        } catch (const gym::AdmissionError&) {
        }
        sleep_ms(rng, 5, 50);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// A verifier subprocess: allocates and touches `mib` MiB, works, exits.
void verifier_subprocess(int mib, int ms) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<char> mem(size_t(mib) << 20);
    for (size_t i = 0; i < mem.size(); i += 4096) mem[i] = 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ::_exit(0);
  }
  if (pid > 0) ::waitpid(pid, nullptr, 0);
}

void resources_server(const char* name, int limit, int workers) {
  gym::declare_server(name, "resources_server");
  gym::MeteredSemaphore verifiers(limit, Component::kResourcesServer, "verifiers", name,
                                  std::chrono::milliseconds(400));
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(unsigned(w * 31 + ::getpid()));
      while (!g_stop) {
        const auto op = static_cast<Operation>(rng() % gym::kOperations.size());
        const auto ex = static_cast<Executor>(rng() % gym::kExecutors.size());
        std::stop_source cancel;
        if (rng() % 40 == 0) cancel.request_stop();
        try {
          gym::ResourcesOperation scope(verifiers, op, ex, cancel.get_token());
          if (ex == Executor::kSubprocess)
            verifier_subprocess(8 + int(rng() % 56), 20 + int(rng() % 200));
          else
            sleep_ms(rng, 1, 300);
          const unsigned roll = rng() % 20;
          if (roll == 0) scope.set_outcome(Outcome::kTimeout);
          if (roll == 1) scope.set_outcome(Outcome::kCrashed);
          if (roll == 2) throw std::runtime_error("verifier failed");
          if (roll == 3 && cancel.stop_requested()) throw std::runtime_error("cancelled");
        } catch (const std::exception&) {
        }
        sleep_ms(rng, 1, 30);
      }
    });
  }
  for (auto& t : threads) t.join();
}

// A Python asyncio server's runtime, simulated with what its instrumentation
// reports: the loop's probe every 350 ms, callbacks of a few milliseconds
// that make it late, and every 20 s or so a synchronous "verifier" run
// inline that blocks the loop for 2 to 4 s; tasks that come and go; young
// collections often, a full one every 10 s.
void python_server() {
  using Clock = std::chrono::steady_clock;
  gym::declare_server("llm_judge", "resources_server");
  gym::LoopMeter loop(std::nullopt, gym::SegmentWriter::process());
  gym::RuntimeMeter runtime(std::nullopt, gym::SegmentWriter::process());
  std::mt19937 rng(unsigned(::getpid()));
  constexpr auto kInterval = 350ms;
  constexpr auto kGrace = 50ms;  // gym_metrics.instrument_runtime's defaults
  Clock::time_point due = Clock::now();
  for (int tick = 0; !g_stop; ++tick) {
    const Clock::time_point now = Clock::now();
    loop.beat(std::chrono::nanoseconds(now - due).count(),
              std::chrono::nanoseconds(kInterval + kGrace).count());
    due = now + kInterval;
    if (tick % 3 == 0) {
      loop.set_tasks(20 + int(rng() % 40));
      runtime.set_threads(3);
    }
    runtime.collected(0, 100000 + int64_t(rng() % 1900000));
    if (tick % 6 == 0) runtime.collected(1, 1000000 + int64_t(rng() % 9000000));
    if (tick % 30 == 0) runtime.collected(2, 20000000 + int64_t(rng() % 180000000));
    if (tick > 0 && rng() % 60 == 0) {  // the inline verifier: the loop is blocked
      const Clock::time_point end = now + std::chrono::milliseconds(2000 + rng() % 2000);
      while (!g_stop && Clock::now() < end) std::this_thread::sleep_for(50ms);
    } else {
      std::this_thread::sleep_until(due + std::chrono::milliseconds(rng() % 20));
    }
  }
}

void server(const std::string& role) {
  std::signal(SIGTERM, [](int) { g_stop = true; });
  if (role == "rollout_driver") {
    gym::declare_server("rollout_driver", "rollout_driver");
    gym::MeteredSemaphore rollouts(16, Component::kRolloutDriver, "rollouts");
    run_limit_workers(rollouts, 21, 50, 400);  // too small: a queue builds
  } else if (role == "agent") {
    gym::declare_server("simple_agent", "agent_server");
    gym::MeteredSemaphore upstream(8, Component::kAgentServer, "upstream_requests", "simple_agent",
                                   std::chrono::milliseconds(150));
    run_limit_workers(upstream, 12, 20, 200);  // timeouts
  } else if (role == "model") {
    gym::declare_server("policy_model", "model_server");
    gym::MeteredSemaphore requests(32, Component::kModelServer, "inference_requests",
                                   "policy_model");
    run_limit_workers(requests, 20, 10, 100);  // never full
  } else if (role == "math") {
    resources_server("math_verifier", 4, 10);
  } else if (role == "code") {
    resources_server("code_sandbox", 8, 6);
  } else if (role == "judge") {
    python_server();
  }
}

}  // namespace

int main(int argc, char** argv) {
  double duration = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--registry.dir=", 0) == 0) {
      ::setenv("GYM_METRICS_DIR", a.substr(15).c_str(), 1);
    } else if (a.rfind("--duration=", 0) == 0) {
      duration = std::atof(a.substr(11).c_str());
    } else if (a == "--help") {
      std::puts("usage: gym-demo [--registry.dir=DIR] [--duration=SECONDS]");
      return 0;
    } else {
      std::fprintf(stderr, "gym-demo: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<std::string> roles = {"rollout_driver", "agent", "model",
                                          "math",           "code",  "judge"};
  std::vector<pid_t> children;
  for (const auto& role : roles) {
    pid_t pid = ::fork();
    if (pid == 0) {
      server(role);
      // A clean exit, as a server's: the library's exit hook lets this
      // process's segment go and folds it, so that nothing of the demo
      // stays in /dev/shm but the folded totals (docs/registry.md).
      std::exit(0);
    }
    children.push_back(pid);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  std::fprintf(
      stderr, "gym-demo: %zu servers running (registry %s)\n", children.size(),
      std::getenv("GYM_METRICS_DIR") ? std::getenv("GYM_METRICS_DIR") : gym::kDefaultRegistryDir);
  if (duration > 0) {
    timespec ts{time_t(duration), long((duration - double(time_t(duration))) * 1e9)};
    sigtimedwait(&set, nullptr, &ts);
  } else {
    int sig;
    sigwait(&set, &sig);
  }
  for (pid_t p : children) ::kill(p, SIGTERM);
  for (pid_t p : children) ::waitpid(p, nullptr, 0);
  return 0;
}
