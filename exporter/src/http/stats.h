// What the HTTP loop counts of its connections: how many are in each state
// of their life (loop.h), why each one closed, and the requests the loop
// refused itself (the handler's replies are counted by SelfMetrics). Served
// by the "self" collector as gym_exporter_http_connections{state},
// gym_exporter_http_connections_closed_total{reason} and, beside the
// handler's, gym_exporter_http_requests_total{path="other"}.
//
// Thread-safety: atomics only; any thread counts and reads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

namespace gym::exporter {

struct HttpStats {
  // The states of a connection's life, as loop.h tells it.
  enum State : uint8_t { kWaiting, kReady, kServing, kSending, kLingering, kStates };
  static constexpr std::array<std::string_view, kStates> kStateNames = {
      "waiting", "ready", "serving", "sending", "lingering"};
  // Why a connection closed.
  enum Close : uint8_t {
    kPeerClosed,    // the peer closed it or broke it (a reset, a failed send)
    kDone,          // after a reply that closed it, and its lingering close
    kHeadTimeout,   // no whole request head (or TLS handshake) in time
    kIdleTimeout,   // kept alive, with no next request in time
    kWriteTimeout,  // a reply that made no progress, or took too long in all
    kEvicted,       // room made for another (max_connections, the per-peer
                    // cap, the memory of replies being sent)
    kTlsError,      // a failed handshake, or no TLS where TLS is served
    kBadRequest,    // refused with a 4xx/5xx by the loop itself
    kShutdown,      // the exporter stopped
    kCloses
  };
  static constexpr std::array<std::string_view, kCloses> kCloseNames = {
      "peer_closed", "done",      "head_timeout", "idle_timeout", "write_timeout",
      "evicted",     "tls_error", "bad_request",  "shutdown"};
  // The statuses the loop answers itself.
  static constexpr std::array<int, 4> kRefusals = {400, 431, 500, 505};

  // The exporter's (one per process); tests give a loop their own.
  static HttpStats& process();

  void enter(State s) noexcept { connections[s].fetch_add(1, std::memory_order_relaxed); }
  void leave(State s) noexcept { connections[s].fetch_sub(1, std::memory_order_relaxed); }
  void closed(Close why) noexcept { closes[why].fetch_add(1, std::memory_order_relaxed); }
  void refused(int status) noexcept {
    for (size_t i = 0; i < kRefusals.size(); ++i)
      if (kRefusals[i] == status) refusals[i].fetch_add(1, std::memory_order_relaxed);
  }
  int64_t in(State s) const noexcept { return connections[s].load(std::memory_order_relaxed); }
  uint64_t closed_for(Close why) const noexcept {
    return closes[why].load(std::memory_order_relaxed);
  }

  std::atomic<int64_t> connections[kStates] = {};
  std::atomic<uint64_t> closes[kCloses] = {};
  std::atomic<uint64_t> refusals[kRefusals.size()] = {};
};

}  // namespace gym::exporter
