#include "common/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>

namespace gym::detail {

namespace {

struct WriterMapping {
  std::atomic<unsigned char*> base{nullptr};
  std::atomic<size_t> size{0};
  std::atomic<bool> lost{false};
};
constexpr size_t kMaxMappings = 256;
WriterMapping g_mappings[kMaxMappings];
// A slot being filled: claimed, but not yet a range the handler may match.
unsigned char* const kClaiming = reinterpret_cast<unsigned char*>(uintptr_t{1});

struct sigaction g_previous {};
std::once_flag g_install_once;

// Initial-exec: the handler reads it without __tls_get_addr.
__attribute__((tls_model("initial-exec"))) thread_local ReadGuard* t_guard = nullptr;

void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = g_previous;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, context);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  // The default action, as if we had never been here: a fault repeats when
  // the instruction runs again; a signal someone sent is raised again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const bool fault = info != nullptr && info->si_code > 0;
  if (fault) {
    auto* addr = static_cast<unsigned char*>(info->si_addr);
    if (ReadGuard* g = t_guard; g != nullptr && addr >= g->lo && addr < g->hi) {
      // The file lost pages under the reader: read zeros from now on and
      // say so; the faulting load runs again on the new page.
      void* lo = const_cast<unsigned char*>(g->lo);
      if (::mmap(lo, size_t(g->hi - g->lo), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) != MAP_FAILED) {
        g->faulted = 1;
        return;
      }
    }
    for (WriterMapping& m : g_mappings) {
      unsigned char* base = m.base.load(std::memory_order_acquire);
      if (base == nullptr || base == kClaiming) continue;
      const size_t size = m.size.load(std::memory_order_relaxed);
      if (addr < base || addr >= base + size) continue;
      // The file under this mapping lost pages: go on in private memory at
      // the same address, so that every handle stays valid.
      if (::mmap(base, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                 0) == MAP_FAILED)
        break;
      m.lost.store(true, std::memory_order_release);
      return;  // the faulting access runs again, on the new page
    }
  }
  chain(sig, info, context);
}

}  // namespace

void install_fault_handler() noexcept {
  std::call_once(g_install_once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = &on_sigbus;
    sigemptyset(&sa.sa_mask);
    // NODEFER: a reader's siglongjmp leaves the handler without restoring
    // the mask, so SIGBUS must not be blocked while it runs.
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

bool protect_writer_mapping(void* base, size_t size) noexcept {
  install_fault_handler();
  auto* b = static_cast<unsigned char*>(base);
  for (WriterMapping& m : g_mappings) {
    if (m.base.load(std::memory_order_acquire) == b) {
      m.lost.store(false, std::memory_order_release);
      return true;
    }
  }
  // Lock-free, so that a fork can never leave a child holding a lock here.
  for (WriterMapping& m : g_mappings) {
    unsigned char* expected = nullptr;
    if (!m.base.compare_exchange_strong(expected, kClaiming, std::memory_order_acq_rel)) continue;
    m.size.store(size, std::memory_order_relaxed);
    m.lost.store(false, std::memory_order_relaxed);
    m.base.store(b, std::memory_order_release);
    return true;
  }
  return false;
}

void unprotect_writer_mapping(void* base) noexcept {
  for (WriterMapping& m : g_mappings) {
    unsigned char* expected = static_cast<unsigned char*>(base);
    if (m.base.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel)) return;
  }
}

void reset_writer_mapping_lost(const void* base) noexcept {
  for (WriterMapping& m : g_mappings)
    if (m.base.load(std::memory_order_acquire) == base)
      m.lost.store(false, std::memory_order_release);
}

bool writer_mapping_lost(const void* base) noexcept {
  for (WriterMapping& m : g_mappings)
    if (m.base.load(std::memory_order_acquire) == base)
      return m.lost.load(std::memory_order_acquire);
  return false;
}

void begin_read_guard(ReadGuard* g, const void* lo, size_t size) noexcept {
  constexpr size_t kPage = 4096;
  g->lo = static_cast<const unsigned char*>(lo);
  g->hi = g->lo + (size + kPage - 1) / kPage * kPage;
  g->faulted = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void end_read_guard() noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = nullptr;
}

}  // namespace gym::detail
