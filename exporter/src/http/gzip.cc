// Compression for the HTTP server's replies: whether a client takes gzip,
// and the gzip itself.
#include <zlib.h>

#include <optional>

#include "exposition/negotiate.h"
#include "http/server.h"

namespace gym::exporter {

bool accepts_gzip(const char* accept_encoding) {
  if (accept_encoding == nullptr) return false;
  // Codings with optional q-values (RFC 9110 12.5.3): gzip unless its q, or
  // that of * when gzip is not named, is 0.
  std::optional<double> gzip, any;
  for (const HeaderItem& item : parse_header_list(accept_encoding)) {
    if (item.value == "gzip")
      gzip = item.q;
    else if (item.value == "*")
      any = item.q;
  }
  if (gzip) return *gzip > 0;
  return any && *any > 0;
}

std::string gzip_compress(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return {};
  // Grown a chunk at a time as deflate fills it: an exposition compresses
  // to a tenth or less, and a buffer of deflateBound (a little more than the
  // input) would be zeroed, so resident, whole: 55 MB beside a 55 MB reply.
  // The reservation is only address space until written.
  constexpr size_t kChunk = size_t{64} << 10;
  std::string out;
  out.reserve(in.size() / 8 + kChunk);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    const size_t have = out.size();
    out.resize(have + kChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + have);
    zs.avail_out = static_cast<uInt>(kChunk);
    rc = deflate(&zs, Z_FINISH);
    out.resize(have + kChunk - zs.avail_out);
  }
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return {};
  return out;
}

}  // namespace gym::exporter
