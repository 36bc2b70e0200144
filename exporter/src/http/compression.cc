// Which coding answers a request, and the pool that keeps coders between
// scrapes (compression.h).
#include "http/compression.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "exposition/negotiate.h"

namespace gym::exporter {

const char* coding_name(Coding c) {
  constexpr const char* kNames[] = {"", "gzip", "zstd"};  // Coding's order
  return kNames[static_cast<size_t>(c)];
}

Coding choose_coding(const char* accept_encoding) {
  if (accept_encoding == nullptr) return Coding::kIdentity;
  std::optional<double> gzip, zstd, identity, any;
  for (const HeaderItem& item : parse_header_list(accept_encoding)) {
    if (item.value == "gzip")
      gzip = item.q;
    else if (item.value == "zstd")
      zstd = item.q;
    else if (item.value == "identity")
      identity = item.q;
    else if (item.value == "*")
      any = item.q;
  }
  // A coding not named takes the q of "*", if any; identity's default is
  // acceptable, below any coding the client names (RFC 9110 12.5.3).
  const double qz = zstd.value_or(any.value_or(0));
  const double qg = gzip.value_or(any.value_or(0));
  const double best = std::max(qz, qg);
  if (best <= 0 || (identity && *identity > best)) return Coding::kIdentity;
  return qz >= qg ? Coding::kZstd : Coding::kGzip;
}

namespace {

// Idle coders of each coding, for the next reply.
class CoderPool {
 public:
  std::unique_ptr<Coder> take(Coding c) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& idle = idle_[index(c)];
    if (idle.empty()) return nullptr;
    std::unique_ptr<Coder> coder = std::move(idle.back());
    idle.pop_back();
    return coder;
  }
  void give_back(Coder* coder) noexcept {
    std::unique_ptr<Coder> owned(coder);
    if (!owned->reset()) return;  // a failed coder is not kept
    std::lock_guard<std::mutex> lock(mu_);
    auto& idle = idle_[index(owned->coding())];
    if (idle.size() >= kPooledCoders) return;
    try {
      idle.push_back(std::move(owned));
    } catch (...) {
      // No memory to keep it: it goes.
    }
  }

 private:
  static size_t index(Coding c) { return c == Coding::kZstd ? 1 : 0; }
  std::mutex mu_;
  std::vector<std::unique_ptr<Coder>> idle_[2];
};

// Never destroyed: a worker may hand a coder back while the process exits.
CoderPool& pool() {
  static auto* p = new CoderPool();
  return *p;
}

}  // namespace

std::unique_ptr<Coder> if_ok(std::unique_ptr<Coder> c) {
  if (!c || !c->ok()) return nullptr;
  return c;
}

std::shared_ptr<Coder> acquire_coder(Coding c) {
  if (c == Coding::kIdentity) return nullptr;
  std::unique_ptr<Coder> coder = pool().take(c);
  if (!coder) coder = c == Coding::kZstd ? make_zstd_coder() : make_gzip_coder();
  if (!coder) return nullptr;
  return std::shared_ptr<Coder>(coder.release(), [](Coder* x) { pool().give_back(x); });
}

std::string compress(Coding c, std::string_view in) {
  // Grown as the coder fills its pieces: an exposition compresses to a
  // tenth or less, and a buffer of the library's bound (a little more than
  // the input) would be zeroed, so resident, whole.
  std::shared_ptr<Coder> coder = acquire_coder(c);
  if (!coder) return {};
  std::string out;
  out.reserve(in.size() / 8 + Coder::kPiece);
  const auto append = [&](std::string_view piece) { out.append(piece); };
  if (!coder->add(in, append) || !coder->finish(append)) return {};
  return out;
}

}  // namespace gym::exporter
