#include "servers/config.h"

#include <functional>
#include <set>

#include "yaml_reader.h"

namespace gym::exporter {

namespace {

// A deprecated key of `section`: read by `read` and removed from the node,
// with a line in `deprecations`; an error when `servers:` sets its new key.
void take_deprecated(YamlReader& rd, YAML::Node& section, const std::string& section_name,
                     const std::string& key, const std::string& new_key, bool new_set,
                     std::vector<std::string>& deprecations,
                     const std::function<void(const YAML::Node&)>& read) {
  if (!section.IsMap()) return;
  const YAML::Node& lookup = section;  // const: a lookup adds no key
  const YAML::Node value = lookup[key];
  if (!value) return;
  const std::string old_key = section_name + "." + key;
  if (new_set)
    rd.error(value, old_key + " and servers." + new_key + " are both set: keep servers." + new_key);
  else
    read(value);
  YAML::Mark at = value.Mark();
  for (const auto& kv : lookup)  // the key's own place, where a reader looks
    if (kv.first.Scalar() == key) at = kv.first.Mark();
  deprecations.push_back(rd.where(at) + old_key + " is deprecated: move it to servers." + new_key +
                         " (read as such until the next release)");
  section.remove(key);
}

}  // namespace

ServersConfig read_servers_section(YamlReader& rd, const YAML::Node& servers, YAML::Node& memory,
                                   YAML::Node& cgroup, std::vector<std::string>& deprecations) {
  ServersConfig c;
  std::set<std::string> set;  // the keys servers: sets
  std::string v2, v1, v1_cpu;
  auto mark = [&](const std::string& key, const std::function<void(const YAML::Node&)>& read) {
    return std::pair{key,
                     std::function<void(const YAML::Node&)>([&set, key, read](const YAML::Node& v) {
                       set.insert(key);
                       read(v);
                     })};
  };
  auto interval = [&](const YAML::Node& v) {
    rd.number(v, "servers.interval_seconds", c.interval_seconds, 0.01);
  };
  auto proc_root = [&](const YAML::Node& v) { rd.string(v, "servers.proc_root", c.proc_root); };
  auto ttl = [&](const YAML::Node& v) {
    rd.number(v, "servers.gone_server_ttl_seconds", c.gone_server_ttl_seconds, 0);
  };
  auto targets = [&](const YAML::Node& v) {
    c.targets = read_server_targets(rd, v, "servers.targets");
  };
  auto v2_mount = [&](const YAML::Node& v) { rd.string(v, "servers.cgroup_v2_mount", v2); };
  auto v1_mount = [&](const YAML::Node& v) { rd.string(v, "servers.cgroup_v1_memory_mount", v1); };
  auto v1_cpu_mount = [&](const YAML::Node& v) {
    rd.string(v, "servers.cgroup_v1_cpu_mount", v1_cpu);
  };
  rd.mapping(servers, "servers",
             {mark("interval_seconds", interval), mark("proc_root", proc_root),
              mark("gone_server_ttl_seconds", ttl), mark("targets", targets),
              mark("cgroup_v2_mount", v2_mount), mark("cgroup_v1_memory_mount", v1_mount),
              mark("cgroup_v1_cpu_mount", v1_cpu_mount)});
  const struct {
    YAML::Node* node;
    const char* section;
    const char* key;
    const char* new_key;
    std::function<void(const YAML::Node&)> read;
  } deprecated[] = {
      {&memory, "memory", "targets", "targets",
       [&](const YAML::Node& v) { c.targets = read_server_targets(rd, v, "memory.targets"); }},
      {&memory, "memory", "proc_root", "proc_root", proc_root},
      {&memory, "memory", "gone_server_ttl_seconds", "gone_server_ttl_seconds", ttl},
      {&cgroup, "cgroup", "v2_mount", "cgroup_v2_mount", v2_mount},
      {&cgroup, "cgroup", "v1_memory_mount", "cgroup_v1_memory_mount", v1_mount}};
  for (const auto& d : deprecated)
    take_deprecated(rd, *d.node, d.section, d.key, d.new_key, set.contains(d.new_key), deprecations,
                    d.read);
  if (!v2.empty() || !v1.empty() || !v1_cpu.empty()) {
    cgroup::Mounts m;
    m.v2 = v2;
    m.v1_memory = v1;
    m.v1_cpu = v1_cpu;
    c.mounts = m;
  }
  return c;
}

}  // namespace gym::exporter
