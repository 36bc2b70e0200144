// How a connection's bytes travel: as they are on its socket, or through
// TLS. The loop decides which when it accepts the connection (a TLS
// listener's connections are TLS from their first byte); from then on the
// connection (conn.h) and the reactor read, write and close through this
// interface and never ask which, as Go's net/http serves a tls.Conn through
// the net.Conn it is.
//
// A transport never blocks: each call does what the socket allows now and
// says what it waits for. Thread-safety: one thread at a time, the
// connection's owner (loop.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

struct ssl_ctx_st;

namespace gym::exporter::http {

class Transport {
 public:
  // What a call came to when it moved no byte (or, for a handshake, what
  // its step came to).
  enum class Step {
    kDone,       // handshake: over; requests may be read
    kWantRead,   // nothing now: call again when the socket is readable
    kWantWrite,  // ... when it is writable
    kEnd,        // the peer finished sending (or closed before a handshake)
    kFailed,     // the connection is broken: close it
    kRefused,    // handshake: the peer is no TLS client (told so if it spoke HTTP)
  };

  virtual ~Transport() = default;
  // Whether requests may be read (a plain connection: from the start).
  virtual bool ready() const = 0;
  // One step of the handshake, as far as the socket allows now.
  virtual Step handshake(int fd) = 0;
  // Reads up to `size` bytes into buf. Returns how many, or 0 and why in
  // `step`.
  virtual size_t read(int fd, char* buf, size_t size, Step* step) = 0;
  // Writes the front of `pieces`, in order, as far as the socket takes it.
  // Returns the bytes taken, or 0 and why in `step`.
  virtual size_t write(int fd, std::span<const std::string_view> pieces, Step* step) = 0;
  // Whether a write that took nothing must be made again with the same
  // bytes (TLS's records: OpenSSL asks it). Such a transport sends only
  // bytes the connection holds until they went; another may send from the
  // caller's bytes and let the caller keep what was not taken.
  virtual bool retries_same_bytes() const = 0;
  // Bytes read from the socket and held inside the transport, which epoll
  // does not see.
  virtual bool pending() const = 0;
  // Tells the peer that nothing more comes (TLS: close_notify), once.
  virtual void finish() = 0;
  // Finishes when it can and frees what the transport holds; later reads
  // and writes fail. The socket stays open (its owner closes it).
  virtual void close() = 0;
};

// Bytes as they are, on the socket.
std::unique_ptr<Transport> plain_transport();
// TLS with `ctx`'s settings (tls.h), server side, on socket `fd`; nullptr
// when OpenSSL cannot make the connection's state.
std::unique_ptr<Transport> tls_transport(ssl_ctx_st* ctx, int fd);

}  // namespace gym::exporter::http
