#include "wiring.h"

#include "servers/watcher.h"

namespace gym::exporter {

ReaderOptions reader_options(const Config& c) {
  ReaderOptions o;
  o.trusted_uids.assign(c.trusted_uids.begin(), c.trusted_uids.end());
  o.retired_series_ttl =
      std::chrono::milliseconds(static_cast<int64_t>(c.retired_series_ttl_seconds * 1000));
  o.max_series = static_cast<size_t>(c.max_series);
  return o;
}

std::vector<std::unique_ptr<Collector>> make_collectors(const Config& c,
                                                        const CollectorContext& base,
                                                        const std::set<std::string>& only) {
  CollectorContext context = base;
  // One watcher of the servers for every per-server collector.
  context.servers = make_watcher(c.servers, base.registry, base.warn);
  std::vector<std::unique_ptr<Collector>> out;
  for (const CollectorKind* kind : collector_kinds()) {
    if (!only.empty() && !only.contains(kind->name)) continue;
    auto it = c.collectors.find(kind->name);
    const CollectorSettings* settings =
        it == c.collectors.end() ? nullptr : it->second.settings.get();
    if (settings != nullptr && !settings->enabled) continue;
    // A kind may decline a context that lacks what it needs (null).
    if (auto made = make_collector(kind->name, context, settings)) out.push_back(std::move(made));
  }
  return out;
}

}  // namespace gym::exporter
