#include "servers/watcher.h"

#include <unistd.h>

namespace gym::exporter {

ServerWatcher::ServerWatcher(ServersConfig config, std::shared_ptr<SharedRegistry> registry,
                             std::function<void(const std::string&)> log)
    : config_(std::move(config)),
      log_(std::move(log)),
      processes_(
          config_, std::move(registry),
          [this](const std::string& reason, const std::string& detail) { error(reason, detail); }) {
  for (const char* r : kReasons) errors_[r] = 0;
}

uint64_t ServerWatcher::namespace_scans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return processes_.trees().namespace_scans();
}

std::map<std::string, uint64_t> ServerWatcher::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

// Under mu_ (from a resolution). Counted every time; logged once while it
// repeats resolution after resolution (a missing pidfile is one line, not one
// per interval). A declarer out of sight is no error of ours: said once (the
// trees say it once per name), counted as unseen.
void ServerWatcher::error(const std::string& reason, const std::string& detail) {
  if (reason != "namespace") ++errors_[reason];
  failing_now_.insert(detail);
  if (!failing_.contains(detail) && log_) log_("servers: " + detail);
}

namespace {
// How old the registry's declarations may be for a view of `max_age`: up to
// the period of the collector that asks (twice its half), so that a scrape's
// snapshot serves, and a watcher alone takes one snapshot a period.
std::chrono::nanoseconds declared_age(std::chrono::duration<double> max_age) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(2 * max_age);
}
}  // namespace

std::shared_ptr<const ServersView> ServerWatcher::view(
    std::chrono::duration<double> max_age, const std::shared_ptr<const ServersView>& seen) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (last_ && last_ != seen && now - last_->taken <= max_age) return last_;
  auto v = std::make_shared<ServersView>(config_.proc_root);
  // A walk skips roots that are no process: a proc root that is not there
  // at all must not read as every server gone.
  v->proc_ok =
      ::access(config_.proc_root.c_str(), R_OK | X_OK) == 0 &&
      v->table.walk_or_scan(processes_.prepare(declared_age(max_age)), tree_files_, stat_files_);
  if (v->proc_ok)
    v->trees = processes_.sample(v->table, now);
  else
    error("proc", "cannot list " + config_.proc_root);
  v->unseen_declarers = processes_.trees().unseen_declarers();
  v->boot_seconds = processes_.trees().boot_seconds();
  failing_.swap(failing_now_);
  failing_now_.clear();
  v->taken = std::chrono::steady_clock::now();
  last_ = v;
  return v;
}

std::shared_ptr<ServerWatcher> make_watcher(ServersConfig config,
                                            std::shared_ptr<SharedRegistry> registry,
                                            std::function<void(const std::string&)> log) {
  return std::make_shared<ServerWatcher>(std::move(config), std::move(registry), std::move(log));
}

}  // namespace gym::exporter
