// Compressed replies: which coding a client takes (Accept-Encoding), and
// the coders themselves, gzip (zlib) and zstd (libzstd), each compressing a
// body that comes in pieces as it comes, handing on what it made a piece
// (kPiece at most) at a time, so that neither the whole input nor the whole
// output is ever held.
//
// A coder's state (zlib's 330 KiB, zstd's 1.4 MiB at level 1, measured by
// bench/exporter_bench.cc) is kept between scrapes in a small pool and
// reset for the next, not made per scrape: allocating it each time made
// client_golang's first zstd slower than its gzip.
//
// Thread-safety: a Coder is used by one thread at a time; acquire_coder and
// the pool behind it from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace gym::exporter {

enum class Coding { kIdentity, kGzip, kZstd };

// The Content-Encoding token of a coding ("" for identity).
const char* coding_name(Coding c);

// The coding that answers an Accept-Encoding header value (null: none): of
// zstd and gzip, the one with the higher q (named, or through "*"); zstd on
// a tie (faster at a smaller size); identity when neither is acceptable or
// identity is preferred by a higher q (RFC 9110 12.5.3).
Coding choose_coding(const char* accept_encoding);

class Coder {
 public:
  using Sink = std::function<void(std::string_view)>;
  static constexpr size_t kPiece = size_t{64} << 10;
  virtual ~Coder() = default;
  virtual Coding coding() const = 0;
  // Compresses `in`, handing `to` what was made of it so far. False when the
  // library failed (the stream is then unusable).
  virtual bool add(std::string_view in, const Sink& to) = 0;
  // Ends the stream, handing `to` the rest; the coder may start a new one.
  virtual bool finish(const Sink& to) = 0;
  // Forgets a stream left unfinished (a reply cut short), to start anew.
  virtual bool reset() = 0;
  // False when its library had no memory for its state, or a call failed.
  bool ok() const { return ok_; }

 protected:
  Coder() : out_(kPiece, '\0') {}
  std::string out_;  // one piece of the library's output
  bool ok_ = false;
};

// A new coder, or null when its library has no memory for its state.
std::unique_ptr<Coder> make_gzip_coder();
std::unique_ptr<Coder> make_zstd_coder();
// `c` when its library set it up, else null.
std::unique_ptr<Coder> if_ok(std::unique_ptr<Coder> c);

// A coder of `c` (not identity) from the pool, or a new one; it goes back to
// the pool when the last copy of the pointer goes (reset, unless it was
// finished). Null when none could be made.
std::shared_ptr<Coder> acquire_coder(Coding c);

// Coders the pool keeps idle, of each coding, at most (a scrape's worker
// takes one; HttpLoop::kMaxWorkers answer at once).
inline constexpr size_t kPooledCoders = 8;

// `in` compressed whole; empty when the coder cannot be made.
std::string compress(Coding c, std::string_view in);

}  // namespace gym::exporter
