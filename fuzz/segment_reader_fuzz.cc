// Fuzz target: the segment reader on hostile segment files.
//
// A valid segment is larger than fuzz inputs, so the input is applied to a
// real segment made by the writer (counters, gauges, histograms, one with
// native buckets and exemplars):
//   byte 0: flags (bit 0: hold the owner lock, so the segment is live and
//           read as such; bit 1: truncate the file to the length in bytes 1-4;
//           bit 2: the segment labelled format 7, the oldest a reader reads:
//           its histograms read as shards and a native array)
//   then patches: [offset: 4 bytes LE][length: 1 byte][bytes], the offset
//   taken modulo the segment's size.
// The reader must neither crash nor read out of bounds, whatever the bytes.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gym/registry_reader.h"
#include "gym/segment_writer.h"

namespace {

// Under /dev/shm, named with the test run's prefix when the suite replays
// the corpus (scripts/test.sh), else "gym-".
std::string scratch(const std::string& name) {
  const char* p = std::getenv("GYM_TEST_SHM_PREFIX");
  const std::string prefix =
      p != nullptr && *p != '\0' && std::strchr(p, '/') == nullptr ? p : "gym-";
  return "/dev/shm/" + prefix + name + "-" + std::to_string(::getpid());
}

const std::vector<unsigned char>& segment_template() {
  static const std::vector<unsigned char> bytes = [] {
    const std::string dir = scratch("fuzz-template");
    std::filesystem::remove_all(dir);
    std::vector<unsigned char> out;
    {
      gym::SegmentWriter writer(dir);
      gym::Label l[] = {{"nemo_gym_concurrency_component", "agent_server"},
                        {"nemo_gym_concurrency_limit_name", "rollouts"}};
      writer.counter("gym_concurrency_admission_cancelled_total", l).add(3);
      gym::Gauge g = writer.gauge("gym_concurrency_limit", l);
      g.set(8);
      const int64_t bounds[] = {1000, 5000, 10000};
      gym::Label o[] = {{"nemo_gym_resources_operation", "verify"}};
      writer.histogram("gym_resources_operation_duration_seconds", o, bounds, 1e9).observe(42);
      // With native buckets: its shards' sums, then the one joint array
      // (format 8; the format 7 copy reads it as shards and a native array).
      gym::Histogram native = writer.histogram("gym_resources_operation_queue_duration_seconds", o,
                                               bounds, 1e9, /*native=*/true);
      native.observe(4200);
      native.observe(0);
      // Exemplars (format 6): slots reserved after the histograms' lines.
      gym::TraceContext trace;
      trace.trace_id.fill(0xab);
      trace.span_id.fill(0xcd);
      native.observe(7000, trace);
      native.observe(99999, trace);
      const std::string path = writer.path();
      out.resize(std::filesystem::file_size(path));
      int fd = ::open(path.c_str(), O_RDONLY);
      if (::pread(fd, out.data(), out.size(), 0) != ssize_t(out.size())) std::abort();
      ::close(fd);
    }
    std::filesystem::remove_all(dir);
    return out;
  }();
  return bytes;
}

// The same segment labelled format 7, the oldest a reader reads: its
// histograms read as shards and a native array, not a joint one.
const std::vector<unsigned char>& format7_template() {
  static const std::vector<unsigned char> bytes = [] {
    std::vector<unsigned char> b = segment_template();
    const uint32_t v = gym::segment::kStringsVersion;
    std::memcpy(b.data() + offsetof(gym::segment::Header, format_version), &v, sizeof v);
    return b;
  }();
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    std::string d = scratch("fuzz-reader");
    std::filesystem::remove_all(d);
    std::filesystem::create_directory(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch("fuzz-reader"), ec);
    });
    return d;
  }();
  size_t pos = 0;
  uint8_t flags = size > 0 ? data[pos++] : 0;
  std::vector<unsigned char> seg = (flags & 4) ? format7_template() : segment_template();
  if (seg.empty()) std::abort();
  uint32_t truncate_to = 0;
  if (flags & 2) {
    if (size < pos + 4) return 0;
    std::memcpy(&truncate_to, data + pos, 4);
    pos += 4;
  }
  while (pos + 5 <= size) {
    uint32_t offset;
    std::memcpy(&offset, data + pos, 4);
    const size_t len = std::min<size_t>(data[pos + 4], size - pos - 5);
    pos += 5;
    offset %= uint32_t(seg.size());
    const size_t n = std::min(len, seg.size() - offset);
    std::memcpy(seg.data() + offset, data + pos, n);
    pos += len;
  }
  const std::string path = dir + "/gym-1-1-1.seg";
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) return 0;
  const size_t length =
      (flags & 2) ? std::min<size_t>(truncate_to % (seg.size() + 1), seg.size()) : seg.size();
  if (::pwrite(fd, seg.data(), length, 0) != ssize_t(length)) {
    ::close(fd);
    return 0;
  }
  if (flags & 1) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    ::fcntl(fd, F_OFD_SETLK, &fl);
  }
  {
    gym::RegistryReader reader(dir);
    for (int i = 0; i < 2; ++i) {
      const gym::Snapshot& snap = reader.snapshot();
      for (const auto& s : snap.series) {
        if (!s.cumulative_buckets.empty() && s.cumulative_buckets.back() != s.count()) std::abort();
        // An exemplar served lies in its bucket, whatever the bytes said.
        if (!s.exemplars.empty() && s.exemplars.size() != s.info->bounds.size() + 1) std::abort();
        for (size_t b = 0; b < s.exemplars.size(); ++b) {
          const gym::Exemplar& x = s.exemplars[b];
          if (x.unix_ns == 0) continue;
          if (!x.trace.valid()) std::abort();
          if (b < s.info->bounds.size() && x.value > s.info->bounds[b]) std::abort();
          if (b > 0 && x.value <= s.info->bounds[b - 1]) std::abort();
        }
      }
    }
  }
  ::close(fd);  // drops the lock
  ::unlink(path.c_str());
  return 0;
}
