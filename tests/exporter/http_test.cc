// The HTTP server's pure parts: content coding negotiation.
#include <gtest/gtest.h>

#include "http_server.h"

namespace gym::exporter {
namespace {

TEST(AcceptEncoding, GzipUnlessItsQualityOrThatOfAStarIsZero) {
  EXPECT_FALSE(accepts_gzip(nullptr));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_TRUE(accepts_gzip("gzip")) << "what Prometheus sends";
  EXPECT_TRUE(accepts_gzip("GZip"));
  EXPECT_TRUE(accepts_gzip("deflate, gzip;q=0.5, br"));
  EXPECT_TRUE(accepts_gzip("gzip ; q=1.0"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000"));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("x-gzip")) << "another coding's name";
  EXPECT_FALSE(accepts_gzip("gzipped"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0, *")) << "gzip named and refused";
  EXPECT_TRUE(accepts_gzip("*;q=0, gzip")) << "gzip named and accepted";
  EXPECT_FALSE(accepts_gzip("gzip;q=abc")) << "an unreadable quality is 0";
  EXPECT_FALSE(accepts_gzip("gzip;q=2")) << "out of range";
}

}  // namespace
}  // namespace gym::exporter
