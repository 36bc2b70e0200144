#include "reader/totals_file.h"

#include <charconv>
#include <cstring>

#include "gym/native_histogram.h"
#include "gym/segment_format.h"

namespace gym::detail {

namespace {

constexpr std::string_view kFirstLine = "gym-exporter-totals 1";
constexpr char kHex[] = "0123456789abcdef";

void put_hex(std::string& out, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kHex[p[i] >> 4]);
    out.push_back(kHex[p[i] & 15]);
  }
}

template <class T>
void put_num(std::string& out, T v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.push_back(' ');
  out.append(buf, r.ptr);
}

// Splits a line into space-separated fields.
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find(' ', i);
    if (j == std::string_view::npos) j = line.size();
    out.push_back(line.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool get_hex(std::string_view s, void* out, size_t n) {
  if (s.size() != 2 * n) return false;
  auto* p = static_cast<unsigned char*>(out);
  for (size_t i = 0; i < n; ++i) {
    const int hi = hex_value(s[2 * i]);
    const int lo = hex_value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

template <class T>
bool get_num(std::string_view s, T& v) {
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

std::string encode_totals(const Totals& t) {
  std::string out(kFirstLine);
  out += "\nboot ";
  put_hex(out, t.boot_id.data(), t.boot_id.size());
  out += "\ndropped";
  put_num(out, t.dropped_series);
  out.push_back('\n');
  for (const std::string& name : t.folded) out += "folded " + name + "\n";
  for (const TotalsSeries& s : t.series) {
    out += "series";
    put_num(out, unsigned{s.kind});
    out.push_back(' ');
    put_hex(out, &s.unit_divisor, sizeof s.unit_divisor);
    put_num(out, s.bounds.size());
    for (int64_t b : s.bounds) put_num(out, b);
    out.push_back(' ');
    put_hex(out, s.text.data(), s.text.size());
    put_num(out, s.last_change_ns);
    put_num(out, s.counter);
    put_num(out, s.sum);
    put_num(out, s.buckets.size());
    for (uint64_t b : s.buckets) put_num(out, b);
    put_num(out, unsigned{s.native_words});  // fields older readers do not have
    put_num(out, s.created_ns);
    out.push_back('\n');
  }
  out += "end\n";
  return out;
}

bool decode_totals(std::string_view text, Totals& out, std::string* why) {
  out = Totals{};
  size_t line_no = 0;
  bool ended = false;
  auto bad = [&](const char* what) {
    *why = "line " + std::to_string(line_no) + ": " + what;
    return false;
  };
  while (!text.empty()) {
    ++line_no;
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) return bad("no newline at the end");
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    if (ended) return bad("text after the end");
    if (line_no == 1) {
      if (line != kFirstLine) return bad("not a gym-exporter totals file");
      continue;
    }
    const std::vector<std::string_view> f = fields_of(line);
    if (f.empty()) return bad("empty line");
    if (f[0] == "end" && f.size() == 1) {
      ended = true;
    } else if (f[0] == "boot" && f.size() == 2) {
      if (!get_hex(f[1], out.boot_id.data(), out.boot_id.size())) return bad("bad boot id");
    } else if (f[0] == "dropped" && f.size() == 2) {
      if (!get_num(f[1], out.dropped_series)) return bad("bad dropped count");
    } else if (f[0] == "folded" && f.size() == 2) {
      if (f[1].empty() || f[1].size() > 255 || f[1].find('/') != std::string_view::npos)
        return bad("bad segment name");
      out.folded.emplace_back(f[1]);
    } else if (f[0] == "series" && f.size() >= 9) {
      TotalsSeries s;
      size_t i = 1;
      unsigned kind = 0;
      size_t nbounds = 0;
      if (!get_num(f[i++], kind) || kind < 1 || kind > 4) return bad("bad kind");
      s.kind = static_cast<uint8_t>(kind);
      if (!get_hex(f[i++], &s.unit_divisor, sizeof s.unit_divisor)) return bad("bad divisor");
      if (!get_num(f[i++], nbounds) || nbounds > segment::kMaxBounds) return bad("bad bounds");
      if (f.size() < i + nbounds + 5) return bad("too few fields");
      s.bounds.resize(nbounds);
      for (size_t b = 0; b < nbounds; ++b)
        if (!get_num(f[i++], s.bounds[b])) return bad("bad bound");
      if (f[i].size() % 2 != 0 || f[i].size() / 2 > segment::kTextBytes) return bad("bad text");
      s.text.resize(f[i].size() / 2);
      if (!get_hex(f[i++], s.text.data(), s.text.size())) return bad("bad text");
      size_t nbuckets = 0;
      if (!get_num(f[i++], s.last_change_ns) || !get_num(f[i++], s.counter) ||
          !get_num(f[i++], s.sum) || !get_num(f[i++], nbuckets))
        return bad("bad value");
      if (nbuckets > segment::kMaxBounds + 1 + native::kWords || f.size() < i + nbuckets ||
          f.size() > i + nbuckets + 2)
        return bad("bad bucket count");
      s.buckets.resize(nbuckets);
      for (size_t b = 0; b < nbuckets; ++b)
        if (!get_num(f[i++], s.buckets[b])) return bad("bad bucket");
      if (i < f.size()) {  // native words (absent in files of version 3 and older exporters)
        unsigned words = 0;
        if (!get_num(f[i++], words) || (words != 0 && words != native::kWords) ||
            (words != 0 && kind != 3))
          return bad("bad native bucket count");
        s.native_words = static_cast<uint16_t>(words);
      }
      if (i < f.size() && (!get_num(f[i++], s.created_ns) || s.created_ns < 0))
        return bad("bad created time");
      out.series.push_back(std::move(s));
    } else {
      return bad("unknown line");
    }
  }
  if (!ended) return bad("no end line (cut short)");
  return true;
}

}  // namespace gym::detail
