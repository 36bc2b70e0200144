// Compression for the HTTP server's replies: whether a client takes gzip,
// and the gzip itself.
#include <zlib.h>

#include <optional>

#include "exposition/negotiate.h"
#include "http_server.h"

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
  std::string out;
  out.resize(deflateBound(&zs, in.size()) + 32);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace gym::exporter
