// What a client's gunzip or unzstd makes of a body, for tests of the
// exporter's compression (link ZLIB::ZLIB and PkgConfig::ZSTD).
#pragma once

#include <zlib.h>
#include <zstd.h>

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

// The zstd frames `in` decompressed, or "" when it is not whole frames
// (cut short or corrupt).
inline std::string unzstd(const std::string& in) {
  ZSTD_DCtx* d = ZSTD_createDCtx();
  if (d == nullptr) return "";
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  size_t left = 1;
  bool ok = !in.empty();
  while (ok && input.pos < input.size) {
    char buf[1 << 16];
    ZSTD_outBuffer output{buf, sizeof buf, 0};
    left = ZSTD_decompressStream(d, &output, &input);
    ok = !ZSTD_isError(left);
    if (ok) out.append(buf, output.pos);
  }
  // The last frame whole: nothing left to flush, none left half read.
  while (ok && left != 0) {
    char buf[1 << 16];
    ZSTD_outBuffer output{buf, sizeof buf, 0};
    left = ZSTD_decompressStream(d, &output, &input);
    ok = !ZSTD_isError(left) && output.pos > 0;
    if (ok) out.append(buf, output.pos);
  }
  ZSTD_freeDCtx(d);
  return ok ? out : "";
}

}  // namespace gym::testing
