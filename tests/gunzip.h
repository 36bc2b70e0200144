// What a client's gunzip makes of a body, for tests of the exporter's
// compression (link ZLIB::ZLIB).
#pragma once

#include <zlib.h>

#include <string>

namespace gym::testing {

// The whole gzip stream `in` inflated, or "" when it is not one whole gzip
// stream (cut short, corrupt, or followed by more bytes).
inline std::string gunzip(const std::string& in) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return "";
  std::string out;
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = uInt(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    char buf[1 << 16];
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END && zs.avail_in == 0 ? out : "";
}

}  // namespace gym::testing
