// The zstd coder (compression.h): one zstd frame (RFC 8878) a reply, at
// level 1, the context reset between frames so that its tables are made
// once.
#include <zstd.h>

#include <memory>

#include "http/compression.h"

namespace gym::exporter {

namespace {

// Level 1, with its own window (512 KiB): zstd's fastest standard level; on
// a 20,000-series exposition it compresses 5 to 10 times faster than
// zlib's fastest, to a third of the bytes (bench/exporter_bench.cc's format rows,
// docs/benchmarks.md). A 128 KiB window saves 0.4 MiB a coder for 40% more
// bytes: not worth it.
constexpr int kLevel = 1;

class ZstdCoder final : public Coder {
 public:
  ZstdCoder() : cctx_(ZSTD_createCCtx()) {
    ok_ = cctx_ != nullptr &&
          !ZSTD_isError(ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, kLevel));
  }
  ~ZstdCoder() override { ZSTD_freeCCtx(cctx_); }
  ZstdCoder(const ZstdCoder&) = delete;
  ZstdCoder& operator=(const ZstdCoder&) = delete;
  Coding coding() const override { return Coding::kZstd; }

  bool add(std::string_view in, const Sink& to) override { return run(in, ZSTD_e_continue, to); }
  bool finish(const Sink& to) override { return run({}, ZSTD_e_end, to); }
  bool reset() override {
    return ok_ && (ok_ = !ZSTD_isError(ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_only)));
  }

 private:
  // Compresses `in` with `mode`, handing `to` each piece zstd fills;
  // ZSTD_e_end goes on until the frame is written whole.
  bool run(std::string_view in, ZSTD_EndDirective mode, const Sink& to) {
    if (!ok_) return false;
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    for (;;) {
      ZSTD_outBuffer output{out_.data(), out_.size(), 0};
      const size_t left = ZSTD_compressStream2(cctx_, &output, &input, mode);
      if (ZSTD_isError(left)) return ok_ = false;
      if (output.pos > 0) to(std::string_view(out_.data(), output.pos));
      const bool done =
          mode == ZSTD_e_end ? left == 0 : input.pos == input.size && output.pos < output.size;
      if (done) return true;
    }
  }

  ZSTD_CCtx* cctx_;
};

}  // namespace

std::unique_ptr<Coder> make_zstd_coder() {
  return if_ok(std::make_unique<ZstdCoder>());
}

}  // namespace gym::exporter
