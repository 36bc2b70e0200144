// The gzip coder (compression.h): zlib's deflate at its fastest level, in a
// gzip wrapper (RFC 1952), reset between streams.
#include <zlib.h>

#include <memory>

#include "http/compression.h"

namespace gym::exporter {

namespace {

class GzipCoder final : public Coder {
 public:
  GzipCoder() {
    ok_ = deflateInit2(&zs_, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK;
  }
  ~GzipCoder() override {
    if (ok_) deflateEnd(&zs_);
  }
  GzipCoder(const GzipCoder&) = delete;
  GzipCoder& operator=(const GzipCoder&) = delete;
  Coding coding() const override { return Coding::kGzip; }

  bool add(std::string_view in, const Sink& to) override {
    // deflate takes at most 4 GiB a call (uInt).
    for (constexpr size_t kMax = size_t{1} << 30; in.size() > kMax; in.remove_prefix(kMax))
      if (!run(in.substr(0, kMax), Z_NO_FLUSH, to)) return false;
    return run(in, Z_NO_FLUSH, to);
  }
  bool finish(const Sink& to) override {
    if (!run({}, Z_FINISH, to)) return false;
    return reset();
  }
  bool reset() override { return ok_ && (ok_ = deflateReset(&zs_) == Z_OK); }

 private:
  // Deflates `in` with `flush`, handing `to` each piece deflate fills.
  // Z_FINISH goes on until the stream's end is written.
  bool run(std::string_view in, int flush, const Sink& to) {
    if (!ok_) return false;
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs_.avail_in = static_cast<uInt>(in.size());
    for (;;) {
      zs_.next_out = reinterpret_cast<Bytef*>(out_.data());
      zs_.avail_out = static_cast<uInt>(out_.size());
      const int rc = deflate(&zs_, flush);
      if (rc == Z_STREAM_ERROR) return ok_ = false;
      const size_t made = out_.size() - zs_.avail_out;
      if (made > 0) to(std::string_view(out_.data(), made));
      if (flush == Z_FINISH ? rc == Z_STREAM_END : zs_.avail_in == 0 && zs_.avail_out != 0)
        return true;
    }
  }

  z_stream zs_{};
};

}  // namespace

std::unique_ptr<Coder> make_gzip_coder() {
  return if_ok(std::make_unique<GzipCoder>());
}

}  // namespace gym::exporter
