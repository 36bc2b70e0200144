// A Gauge keeps an unregistered value in itself: no heap block per gauge, and
// the value follows the gauge when it moves. Counts this binary's allocations.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "gym/segment_writer.h"

namespace {
thread_local bool t_counting = false;
thread_local size_t t_allocations = 0;
}  // namespace

void* operator new(size_t n) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}

namespace gym {
namespace {

TEST(GaugeStorage, AnUnregisteredGaugeAllocatesNothing) {
  t_allocations = 0;
  t_counting = true;
  Gauge g;
  g.set(5);
  Gauge moved(std::move(g));
  t_counting = false;
  EXPECT_EQ(t_allocations, 0u);
  EXPECT_EQ(moved.value(), 5);
  EXPECT_FALSE(moved.registered());
}

TEST(GaugeStorage, AnUnregisteredValueFollowsTheGaugeThroughMoves) {
  Gauge a;
  a.add(7);
  Gauge b;
  b = std::move(a);
  b.add(1);
  Gauge c(std::move(b));
  EXPECT_EQ(c.value(), 8);
  EXPECT_NE(c.raw(), a.raw());
  EXPECT_NE(c.raw(), b.raw());
  // The moved-from gauges may still be updated without touching c.
  a.add(100);
  b.add(100);
  EXPECT_EQ(c.value(), 8);
}

}  // namespace
}  // namespace gym
