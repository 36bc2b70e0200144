#include "servers/targets.h"

#include <map>
#include <regex>

#include "gym/contract.h"
#include "yaml_reader.h"

namespace gym::exporter {

namespace {

// Why `re` is refused before std::regex sees it: libstdc++ reads the numbers
// of repetitions ({m,n}) and back-references (\N) into an int without an
// overflow check (undefined behaviour; found by fuzzing), and large counts
// make the compiled automaton huge. Empty: none.
std::string regex_problem(std::string_view re) {
  if (re.size() > 1024) return "is longer than 1024 characters";
  auto digits_at = [&](size_t i) {
    size_t j = i;
    while (j < re.size() && re[j] >= '0' && re[j] <= '9') ++j;
    return j - i;
  };
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      if (i + 1 < re.size() && re[i + 1] >= '1' && re[i + 1] <= '9' && digits_at(i + 1) > 2)
        return "has a back-reference above \\99";
      ++i;  // the escaped character
      continue;
    }
    if (in_class) {
      in_class = c != ']';
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '{') continue;
    for (size_t j = i + 1; j < re.size() && re[j] != '}'; ++j) {
      const size_t n = digits_at(j);
      if (n > 4 || (n > 0 && std::stoul(std::string(re.substr(j, n))) > 1000))
        return "repeats something more than 1000 times";
      j += n > 0 ? n - 1 : 0;
    }
  }
  return {};
}

// A cmdline regex that `re` may be compiled from, or why not (a message).
std::string check_cmdline(const std::string& re) {
  if (std::string why = regex_problem(re); !why.empty()) return "match.cmdline " + why;
  try {
    std::regex compiled(re);
  } catch (const std::regex_error& e) {
    return std::string("match.cmdline is not a valid regular expression: ") + e.what();
  }
  return {};
}

// The match: section of a target: exactly one of comm, cmdline and
// ray_actor (a Ray actor's class: Ray titles its worker processes
// "ray::<Class>.<method>" or "ray::<Class>"), and `all`.
void read_match(YamlReader& rd, const YAML::Node& v, ServerTarget& t) {
  int kinds = 0;
  auto cmdline = [&](const YAML::Node& c, const std::string& re) {
    if (std::string why = check_cmdline(re); !why.empty()) {
      rd.error(c, why);
      t.match_cmdline.clear();
      return;
    }
    t.match_cmdline = re;
  };
  rd.mapping(v, "match",
             {{"comm",
               [&](const YAML::Node& c) {
                 ++kinds;
                 rd.string(c, "match.comm", t.match_comm);
               }},
              {"cmdline",
               [&](const YAML::Node& c) {
                 ++kinds;
                 std::string re;
                 if (rd.string(c, "match.cmdline", re)) cmdline(c, re);
               }},
              {"ray_actor",
               [&](const YAML::Node& c) {
                 ++kinds;
                 std::string actor;
                 if (!rd.string(c, "match.ray_actor", actor)) return;
                 if (actor.empty() ||
                     actor.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789_") != std::string::npos) {
                   rd.error(c, "match.ray_actor must be a class name (letters, digits, _)");
                   return;
                 }
                 cmdline(c, "^ray::" + actor + "(\\.|\\s|$)");
               }},
              {"all", [&](const YAML::Node& c) { rd.boolean(c, "match.all", t.match_all); }}});
  if (kinds != 1) rd.error(v, "match needs exactly one of comm, cmdline and ray_actor");
}

// `pss`: auto (the stall budget decides: collectors/pss_budget.h), true
// (read at every due sample, whatever it stalls) or false (never).
void read_pss(YamlReader& rd, const YAML::Node& v, ServerTarget& t) {
  if (v.IsScalar() && v.Scalar() == "auto") {
    t.pss.reset();
    return;
  }
  bool on = false;
  if (!v.IsScalar() || !YAML::convert<bool>::decode(v, on)) {
    rd.error(v, "pss must be auto, true or false");
    return;
  }
  t.pss = on;
}

ServerTarget read_target(YamlReader& rd, const YAML::Node& item, const std::string& section) {
  ServerTarget t;
  int selectors = 0;
  bool has_name = false;
  bool has_type = false;
  rd.mapping(item, section + "[]",
             {{"name", [&](const YAML::Node& v) { has_name = rd.string(v, "name", t.name); }},
              {"server_type",
               [&](const YAML::Node& v) { has_type = rd.string(v, "server_type", t.server_type); }},
              {"pid",
               [&](const YAML::Node& v) {
                 ++selectors;
                 int pid = 0;
                 rd.integer(v, "pid", pid, 1, 1 << 30);
                 t.pid = pid;
               }},
              {"pidfile",
               [&](const YAML::Node& v) {
                 ++selectors;
                 rd.string(v, "pidfile", t.pidfile);
               }},
              {"match",
               [&](const YAML::Node& v) {
                 ++selectors;
                 read_match(rd, v, t);
               }},
              {"cgroups",
               [&](const YAML::Node& v) {
                 if (!v.IsSequence() || v.size() == 0) {
                   rd.error(v, "cgroups must be a list of cgroup paths or glob patterns");
                   return;
                 }
                 for (const auto& c : v) {
                   std::string path;
                   if (!rd.string(c, "cgroups[]", path)) continue;
                   if (path.empty() || path.find("..") != std::string::npos)
                     rd.error(c, "a cgroups entry must be a path under the cgroup mount, no '..'");
                   else
                     t.cgroups.push_back(path);
                 }
               }},
              {"max_roots",
               [&](const YAML::Node& v) { rd.integer(v, "max_roots", t.max_roots, 1, 100000); }},
              {"pss", [&](const YAML::Node& v) { read_pss(rd, v, t); }}});
  if (!item.IsMap()) return t;
  if (!has_name || !valid_server_name(t.name))
    rd.error(item, "a server target needs a name of 1 to 128 characters");
  if (!has_type || !valid_server_name(t.server_type))
    rd.error(item, "server target '" + t.name + "' needs a server_type of 1 to 128 characters");
  if (selectors > 1 || (selectors == 0 && t.cgroups.empty()))
    rd.error(item, "server target '" + t.name +
                       "' needs exactly one of pid, pidfile and match, or cgroups, or both");
  return t;
}

}  // namespace

std::vector<ServerTarget> read_server_targets(YamlReader& rd, const YAML::Node& n,
                                              const std::string& section) {
  std::vector<ServerTarget> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) {
    rd.error(n, section + " must be a list");
    return out;
  }
  std::map<std::string, YAML::Mark> seen;
  for (const auto& item : n) {
    ServerTarget t = read_target(rd, item, section);
    if (!t.name.empty()) {
      auto [it, fresh] = seen.emplace(t.name, item.Mark());
      if (!fresh)
        rd.error(item, "server target name '" + t.name + "' is used twice (also at " +
                           std::to_string(it->second.line + 1) + ":" +
                           std::to_string(it->second.column + 1) + ")");
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace gym::exporter
