// Server identity: a process declares which Gym server it is. The exporter
// then labels this process's resources-operation series with
// nemo_gym_server_name and samples this process's tree as a memory target.
//
// Thread-safety: safe from any thread. Declare before the first resources
// operation: series registered earlier keep no server label.
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
// type. Declaring again replaces the identity.
void declare_server(std::string_view name, std::string_view server_type,
                    SegmentWriter& writer = SegmentWriter::process());

// The identity this process declared, if any.
std::optional<ServerIdentity> declared_server();

}  // namespace gym
