// The exporter's own requests, connections and reloads (self_metrics.h,
// http/stats.h): gym_exporter_http_requests_total,
// gym_exporter_http_connections, gym_exporter_http_connections_closed_total,
// gym_exporter_config_reloads_total,
// gym_exporter_config_last_reload_successful and
// gym_exporter_config_last_reload_success_timestamp_seconds.
#include <algorithm>
#include <string>

#include "collector.h"
#include "contract/families.h"
#include "http/stats.h"
#include "self_metrics.h"

namespace gym::exporter {
namespace {

using prometheus::MetricFamily;

// The HTTP loop's counts: every state and every reason from the start (a
// closed-connection reason of 0 is an answer too); the loop's own refusals
// beside the handler's requests, under path="other".
void add_connections(Families& out, MetricFamily& requests) {
  const HttpStats& h = HttpStats::process();
  MetricFamily& open = add_family(out, "gym_exporter_http_connections");
  for (size_t s = 0; s < HttpStats::kStates; ++s)
    add_metric(open, {{"state", std::string(HttpStats::kStateNames[s])}}).gauge.value =
        double(std::max<int64_t>(h.in(HttpStats::State(s)), 0));
  MetricFamily& closed = add_family(out, "gym_exporter_http_connections_closed_total");
  for (size_t r = 0; r < HttpStats::kCloses; ++r)
    add_metric(closed, {{"reason", std::string(HttpStats::kCloseNames[r])}}).counter.value =
        double(h.closed_for(HttpStats::Close(r)));
  for (size_t i = 0; i < HttpStats::kRefusals.size(); ++i)
    if (const uint64_t n = h.refusals[i].load(std::memory_order_relaxed); n > 0)
      add_metric(requests, {{"code", std::to_string(HttpStats::kRefusals[i])}, {"path", "other"}})
          .counter.value = double(n);
}

class SelfCollector : public Collector {
 public:
  void collect(const Emit& emit) override {
    const SelfMetrics& m = SelfMetrics::process();
    Families out;
    MetricFamily& requests = add_family(out, "gym_exporter_http_requests_total");
    for (size_t p = 0; p < SelfMetrics::kPaths.size(); ++p)
      for (size_t c = 0; c < SelfMetrics::kCodes.size(); ++c) {
        const uint64_t n = m.requests(p, c);
        // Every path's 200 from the start; other codes once they happened.
        if (n == 0 && c != 0) continue;
        add_metric(requests, {{"code", std::to_string(SelfMetrics::kCodes[c])},
                              {"path", std::string(SelfMetrics::kPaths[p])}})
            .counter.value = double(n);
      }
    add_connections(out, requests);
    MetricFamily& reloads = add_family(out, "gym_exporter_config_reloads_total");
    add_metric(reloads, {{"result", "success"}}).counter.value = double(m.reloads(true));
    add_metric(reloads, {{"result", "failure"}}).counter.value = double(m.reloads(false));
    add_simple(out, "gym_exporter_config_last_reload_successful", m.last_reload_ok() ? 1 : 0);
    add_simple(out, "gym_exporter_config_last_reload_success_timestamp_seconds",
               m.last_success_unix_seconds());
    // They count from the exporter's start.
    for (const Family& f : out) emit_since(emit, f, exporter_start_unix_seconds());
  }
};

GYM_REGISTER_COLLECTOR(plain_kind<SelfCollector>("self", 95));

}  // namespace
}  // namespace gym::exporter
