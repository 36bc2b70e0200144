#include "collectors/cgroup_totals.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "host/procfs.h"

namespace gym::exporter {

namespace {

using C = CgroupCollector;
constexpr std::string_view kMagic = "gym-exporter-cgroup-totals 1 ";

bool plain(const std::string& s) {
  return s.find_first_of("\t\n") == std::string::npos;
}

// The next space-separated word of `line`, moved past.
std::string_view word(std::string_view& line) {
  const size_t end = std::min(line.find(' '), line.size());
  const std::string_view w = line.substr(0, end);
  line.remove_prefix(std::min(end + 1, line.size()));
  return w;
}

bool number(std::string_view w, uint64_t& v) {
  auto r = std::from_chars(w.data(), w.data() + w.size(), v);
  return !w.empty() && r.ec == std::errc() && r.ptr == w.data() + w.size();
}

// "<a>\t<b>" into a and b.
bool pair_of(std::string_view rest, std::string& a, std::string& b) {
  const size_t tab = rest.find('\t');
  if (tab == std::string_view::npos) return false;
  a = rest.substr(0, tab);
  b = rest.substr(tab + 1);
  return plain(b);
}

bool server_line(std::string_view line, C::ServerTotals& t) {
  const std::string_view seen = word(line);
  if (seen.size() != C::kCounts) return false;
  for (size_t i = 0; i < C::kCounts; ++i) {
    if (seen[i] != '0' && seen[i] != '1') return false;
    t.seen[i] = seen[i] == '1';
    if (!number(word(line), t.gone[i])) return false;
  }
  return pair_of(line, t.server_type, t.name);
}

bool cgroup_line(std::string_view line, C::ServerTotals::Kept& k) {
  uint64_t version = 0, memory = 0, cpu = 0;
  if (!number(word(line), version) || (version != 1 && version != 2)) return false;
  if (!number(word(line), memory) || !number(word(line), cpu) || memory > 1 || cpu > 1)
    return false;
  if (!number(word(line), k.inode)) return false;
  k.place.version = int(version);
  k.memory = memory == 1;
  k.cpu = cpu == 1;
  for (C::Counter& c : k.counts) {
    const std::string_view last = word(line);
    uint64_t v = 0;
    if (last != "-" && !number(last, v)) return false;
    if (last != "-") c.last = v;
    if (!number(word(line), c.total)) return false;
  }
  return pair_of(line, k.place.path, k.place.dir) && !k.place.dir.empty();
}

}  // namespace

std::string encode_cgroup_totals(const CgroupTotals& totals, std::string_view boot) {
  std::string out(kMagic);
  out.append(boot).push_back('\n');
  for (const auto& [name, t] : totals) {
    if (!plain(t.name) || !plain(t.server_type)) continue;
    out += "server ";
    for (bool b : t.seen) out.push_back(b ? '1' : '0');
    for (uint64_t g : t.gone) out += " " + std::to_string(g);
    out += " " + t.server_type + "\t" + t.name + "\n";
    for (const auto& [dir, k] : t.cgroups) {
      if (!plain(k.place.path) || !plain(dir)) continue;
      out += "cgroup " + std::to_string(k.place.version) + (k.memory ? " 1" : " 0") +
             (k.cpu ? " 1 " : " 0 ") + std::to_string(k.inode);
      for (const C::Counter& c : k.counts)
        out += " " + (c.last ? std::to_string(*c.last) : "-") + " " + std::to_string(c.total);
      out += " " + k.place.path + "\t" + dir + "\n";
    }
  }
  return out;
}

bool decode_cgroup_totals(std::string_view text, std::string_view boot, CgroupTotals& out,
                          std::string& why) {
  const size_t eol = text.find('\n');
  if (!text.starts_with(kMagic) || eol == std::string_view::npos) {
    why = "not a cgroup totals file of this version";
    return false;
  }
  if (text.substr(kMagic.size(), eol - kMagic.size()) != boot || boot.empty()) {
    why = "written before the host last booted";
    return false;
  }
  CgroupTotals got;
  C::ServerTotals* server = nullptr;
  size_t at = eol + 1, n = 1;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++n;
    const std::string_view kind = word(line);
    C::ServerTotals t;
    C::ServerTotals::Kept k;
    if (kind == "server" && server_line(line, t)) {
      const std::string name = t.name;
      server = &(got[name] = std::move(t));
    } else if (kind == "cgroup" && server != nullptr && cgroup_line(line, k)) {
      const std::string dir = k.place.dir;
      server->cgroups[dir] = std::move(k);
    } else {
      why = "line " + std::to_string(n) + " is not one it knows";
      return false;
    }
  }
  out = std::move(got);
  return true;
}

bool load_cgroup_totals(const std::string& path, std::string_view boot_id, CgroupTotals& out,
                        std::string& why) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return errno == ENOENT;
  }
  struct stat st {};
  std::string text;
  bool ok =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && size_t(st.st_size) <= kMaxCgroupTotalsBytes;
  if (ok) {
    text.resize(size_t(st.st_size));
    const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
    ok = got == ssize_t(text.size());
  }
  ::close(fd);
  if (!ok) {
    why = "not a regular file of a sensible size, or unreadable";
    return false;
  }
  return decode_cgroup_totals(text, boot_id, out, why);
}

bool save_cgroup_totals(const std::string& path, std::string_view boot_id,
                        const CgroupTotals& totals, std::string& why) {
  return procfs::write_file_whole(path, encode_cgroup_totals(totals, boot_id), why);
}

}  // namespace gym::exporter
