#include "gym/server_identity.h"

#include <memory>
#include <mutex>
#include <stdexcept>

#include "gym/contract.h"

namespace gym {

namespace {
std::mutex g_mu;
std::optional<ServerIdentity> g_identity;
bool g_taken = false;               // operation series were registered with g_identity
Gauge* g_identity_gauge = nullptr;  // never destroyed: lives as long as the process

void check(std::string_view what, std::string_view v) {
  if (!valid_server_name(v))
    throw std::invalid_argument(std::string(what) + " '" + std::string(v) +
                                "' must be 1 to 128 bytes");
}
}  // namespace

void declare_server(std::string_view name, std::string_view server_type, SegmentWriter& writer) {
  check("server name", name);
  check("server type", server_type);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_taken &&
      !(g_identity && g_identity->name == name && g_identity->server_type == server_type))
    throw std::logic_error(
        "declare_server('" + std::string(name) + "', '" + std::string(server_type) +
        "') refused: this process's resources-operation series were registered " +
        (g_identity ? "as server '" + g_identity->name + "'" : std::string("without a server")) +
        " by its first operation; declare the server before the first operation");
  Label labels[] = {{label::kServerName, name}, {label::kServerType, server_type}};
  if (g_identity_gauge == nullptr) g_identity_gauge = new Gauge;
  *g_identity_gauge = writer.gauge(family::kServerIdentity, labels);
  g_identity_gauge->set(1);
  g_identity = ServerIdentity{std::string(name), std::string(server_type)};
}

std::optional<ServerIdentity> declared_server() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_identity;
}

namespace detail {
void identity_prepare_fork() noexcept {
  g_mu.lock();
}

void identity_after_fork(bool child) noexcept {
  if (child) g_taken = false;
  g_mu.unlock();
}

std::optional<ServerIdentity> identity_for_series() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_taken = true;
  return g_identity;
}
}  // namespace detail

}  // namespace gym
