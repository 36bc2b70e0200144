// The folded totals the retiring reader keeps in `<dir>/.exporter-totals`, as
// text (one line per series), so that counters of exited writers survive a
// restart of the exporter. Any process of the user can write that file, so
// decoding checks every field and refuses the whole file on the first bad
// line (the caller then starts from zero and says so).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gym::detail {

struct TotalsSeries {
  uint8_t kind = 0;  // segment::SeriesKind
  double unit_divisor = 1;
  std::vector<int64_t> bounds;
  std::string text;  // as in a record: "family\0name\0value\0..."
  int64_t last_change_ns = 0;
  uint64_t counter = 0;
  int64_t sum = 0;
  // Histograms: bounds + 1, then native_words native buckets; not cumulative.
  std::vector<uint64_t> buckets;
  uint16_t native_words = 0;  // histograms: native::kWords when native, else 0
  int64_t created_ns = 0;     // since when it counts (Unix ns); 0: not known
};

struct Totals {
  std::array<uint8_t, 16> boot_id{};
  uint64_t dropped_series = 0;
  // Segments folded in whose files may still be in the directory.
  std::vector<std::string> folded;
  std::vector<TotalsSeries> series;
};

std::string encode_totals(const Totals& t);
// False, with why, for anything that is not a file encode_totals wrote.
bool decode_totals(std::string_view text, Totals& out, std::string* why);

}  // namespace gym::detail
