// The exporter's own requests and reloads (self_metrics.h):
// gym_exporter_http_requests_total, gym_exporter_config_reloads_total,
// gym_exporter_config_last_reload_successful and
// gym_exporter_config_last_reload_success_timestamp_seconds.
#include <string>

#include "collector.h"
#include "exposition/families.h"
#include "self_metrics.h"

namespace gym::exporter {
namespace {

using prometheus::MetricFamily;

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
