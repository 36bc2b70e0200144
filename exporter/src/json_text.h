// JSON text in one place: a string as a JSON string literal, for every JSON
// document the exporter writes (the snapshot and deaths documents in
// snapshot/json.cc, the file_sd entry in sd_file.cc).
//
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace gym::exporter {

// `s` quoted and escaped: `"` and `\` by a backslash, every other byte below
// 0x20 as \u00XX; the rest as it is.
std::string json_quote(std::string_view s);

}  // namespace gym::exporter
