// Server identity: a process declares which Gym server it is. The exporter
// then labels this process's resources-operation series with
// nemo_gym_server_name and samples this process's tree as a memory target.
//
// Thread-safety: safe from any thread. Declare before the first resources
// operation: its series take the identity declared then (none, or the name)
// and keep it, so a later declaration of another identity is refused
// (std::logic_error; GYM_ESTATE through the C ABI; RuntimeError in Python)
// rather than leave some series of the server without its label. A forked
// child's operations register their series afresh: it may declare its own.
//
// API (docs/api.md): declare_server and declared_server. The rest
// (identity_for_series, the fork hooks) is internal.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gym/segment_writer.h"

namespace gym {

struct ServerIdentity {
  std::string name;
  std::string server_type;
};

// Throws std::invalid_argument for an empty or over-long (128 bytes) name or
// type. Declaring again replaces the identity, until the first resources
// operation: after it, declaring anything but the identity its series took
// throws std::logic_error and changes nothing.
void declare_server(std::string_view name, std::string_view server_type,
                    SegmentWriter& writer = SegmentWriter::process());

// The identity this process declared, if any.
std::optional<ServerIdentity> declared_server();

namespace detail {
// The identity for the resources-operation series being registered: from now
// on, it is the only one declare_server accepts (a forked child inherits this).
std::optional<ServerIdentity> identity_for_series();
// Fork handlers (OperationMetrics::process() installs them): the child keeps
// the identity and may declare another, as its operation series register
// afresh.
void identity_prepare_fork() noexcept;
void identity_after_fork(bool child) noexcept;
}  // namespace detail

}  // namespace gym
