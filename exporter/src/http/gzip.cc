// Compression for the HTTP server's replies: whether a client takes gzip,
// and the gzip itself.
#include <zlib.h>

#include <memory>
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

GzipStream::GzipStream() : zs_(std::make_unique<z_stream>()), out_(kPiece, '\0') {
  ok_ = deflateInit2(zs_.get(), Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;
}

GzipStream::~GzipStream() {
  if (ok_) deflateEnd(zs_.get());
}

// Deflates `in` with `flush`, handing `to` each piece deflate fills (kPiece
// at most). Z_FINISH goes on until the stream's end is written.
bool GzipStream::run(std::string_view in, int flush, const Sink& to) {
  if (!ok_) return false;
  zs_->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs_->avail_in = static_cast<uInt>(in.size());
  for (;;) {
    zs_->next_out = reinterpret_cast<Bytef*>(out_.data());
    zs_->avail_out = static_cast<uInt>(out_.size());
    const int rc = deflate(zs_.get(), flush);
    if (rc == Z_STREAM_ERROR) return ok_ = false;
    const size_t made = out_.size() - zs_->avail_out;
    if (made > 0) to(std::string_view(out_.data(), made));
    if (flush == Z_FINISH ? rc == Z_STREAM_END : zs_->avail_in == 0 && zs_->avail_out != 0)
      return true;
  }
}

bool GzipStream::add(std::string_view in, const Sink& to) {
  // deflate takes at most 4 GiB a call (uInt).
  for (constexpr size_t kMax = size_t{1} << 30; in.size() > kMax; in.remove_prefix(kMax))
    if (!run(in.substr(0, kMax), Z_NO_FLUSH, to)) return false;
  return run(in, Z_NO_FLUSH, to);
}

bool GzipStream::finish(const Sink& to) {
  return run({}, Z_FINISH, to);
}

std::string gzip_compress(const std::string& in) {
  // Grown as deflate fills its pieces: an exposition compresses to a tenth
  // or less, and a buffer of deflateBound (a little more than the input)
  // would be zeroed, so resident, whole. The reservation is only address
  // space until written.
  GzipStream zip;
  std::string out;
  out.reserve(in.size() / 8 + GzipStream::kPiece);
  const auto append = [&](std::string_view piece) { out.append(piece); };
  if (!zip.ok() || !zip.add(in, append) || !zip.finish(append)) return {};
  return out;
}

}  // namespace gym::exporter
