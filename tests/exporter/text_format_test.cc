// Our text writer against the reference, prometheus-cpp's TextSerializer, on
// the same families: the same HELP and TYPE lines and the same samples with
// the same values.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "collector.h"
#include "contract/families.h"
#include "exposition/exposition.h"
#include "exposition/text.h"
#include "gym/contract.h"
#include "gym/metered_semaphore.h"
#include "gym/resources_operation.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

struct Parsed {
  std::vector<std::string> comments;      // HELP and TYPE lines, in order
  std::map<std::string, double> samples;  // "name{labels}" -> value
  std::vector<std::string> sample_order;
};

Parsed parse(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      p.comments.push_back(line);
      continue;
    }
    const auto space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    const std::string key = line.substr(0, space);
    const std::string value = line.substr(space + 1);
    double v = value == "+Inf" ? INFINITY : value == "-Inf" ? -INFINITY : std::stod(value);
    EXPECT_TRUE(p.samples.emplace(key, v).second) << "duplicate sample " << key;
    p.sample_order.push_back(key);
  }
  return p;
}

void expect_same_as_reference(const std::vector<prometheus::MetricFamily>& families) {
  std::string ours;
  write_text(families, ours);
  std::ostringstream reference;
  prometheus::TextSerializer().Serialize(reference, families);
  const Parsed a = parse(ours);
  const Parsed b = parse(reference.str());
  EXPECT_EQ(a.comments, b.comments);
  EXPECT_EQ(a.sample_order, b.sample_order);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (const auto& [key, value] : b.samples) {
    ASSERT_EQ(a.samples.count(key), 1u) << key;
    if (std::isnan(value))
      EXPECT_TRUE(std::isnan(a.samples.at(key))) << key;
    else
      EXPECT_DOUBLE_EQ(a.samples.at(key), value) << key;
  }
}

TEST(TextFormat, MatchesPrometheusCppOnTheExportersOwnFamilies) {
  testing::TempDir tmp;
  SegmentWriter writer(tmp.path());
  OperationMetrics metrics(writer);
  MeteredSemaphore sem(3, Component::kAgentServer, "rollouts", "odd \"name\"\\\nx",
                       std::chrono::milliseconds(1), writer);
  sem.acquire();
  std::counting_semaphore<4> limit(4);
  for (int i = 0; i < 5; ++i) {
    ResourcesOperation op(limit, Operation::kJudge, Executor::kThread, {}, metrics);
    if (i == 2) op.set_outcome(Outcome::kCrashed);
  }
  std::vector<std::unique_ptr<Collector>> collectors;
  const CollectorContext context{std::make_shared<SharedRegistry>(tmp.path())};
  for (const char* kind : {"registry", "build_info", "process"})
    collectors.push_back(make_collector(kind, context));
  for (int scrape = 0; scrape < 2; ++scrape) {  // a rebuilt model, then an updated one
    std::vector<prometheus::MetricFamily> families;
    for (auto& c : collectors)
      c->collect([&](const prometheus::MetricFamily& f) { families.push_back(f); });
    ASSERT_GT(families.size(), 10u);
    expect_same_as_reference(families);
    sem.release();
    sem.acquire();
  }
  sem.release();
}

TEST(TextFormat, MatchesPrometheusCppOnOddValuesAndTypes) {
  std::vector<prometheus::MetricFamily> families(4);
  families[0].name = "odd_gauge";
  families[0].help = "help with \"quotes\"";
  families[0].type = prometheus::MetricType::Gauge;
  for (double v : {0.0, -1.5, 1e20, 1e-7, 123456789.0, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(), std::nan("")}) {
    prometheus::ClientMetric m;
    m.label.push_back({"v", std::to_string(families[0].metric.size())});
    m.gauge.value = v;
    families[0].metric.push_back(m);
  }
  families[1].name = "plain_untyped";
  families[1].type = prometheus::MetricType::Untyped;
  families[1].metric.emplace_back();
  families[1].metric.back().untyped.value = 42;
  families[2].name = "a_summary";
  families[2].type = prometheus::MetricType::Summary;
  families[2].metric.emplace_back();
  families[2].metric.back().summary.sample_count = 3;
  families[2].metric.back().summary.sample_sum = 0.25;
  families[2].metric.back().summary.quantile = {{0.5, 0.1}, {0.99, 0.2}};
  families[3].name = "empty_family";  // no samples: its TYPE line only
  families[3].type = prometheus::MetricType::Counter;
  expect_same_as_reference(families);
}

// A value's text is the shortest that reads back as it, std::to_chars's,
// byte for byte: whole numbers (written as integers where that is the same
// text) and others, at the edges of where the integer form is the same.
TEST(TextFormat, WritesEachValueAsTheShortestTextThatReadsBackAsIt) {
  std::vector<double> values = {
      0.0, -0.0,     1,        7,          9,          10,         11,     99,        100,
      101, 1000000,  1000001,  123456789,  1234567890, 0.5,        1.5,    2.25,      -1,
      -17, 1e15 + 1, 1e16 + 2, 0x1p53 - 1, 0x1p53,     0x1p53 + 2, 0x1p60, 1e21 + 1e6};
  for (uint64_t n = 1; n < 1000000000000ull; n = n * 7 + 3) values.push_back(double(n));
  prometheus::MetricFamily f;
  f.name = "values";
  f.type = prometheus::MetricType::Gauge;
  for (double v : values) {
    prometheus::ClientMetric m;
    m.gauge.value = v;
    f.metric.push_back(m);
  }
  std::string out;
  write_family(f, out);
  std::istringstream in(out);
  std::string line;
  size_t i = 0;
  while (std::getline(in, line)) {
    if (line.starts_with("#")) continue;
    ASSERT_LT(i, values.size());
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, values[i]);
    EXPECT_EQ(line, "values " + std::string(buf, r.ptr)) << "value " << i;
    ++i;
  }
  EXPECT_EQ(i, values.size());
}

// Where we differ from the reference on purpose: prometheus-cpp 1.0.1 writes
// HELP text unescaped, so a backslash or newline in it breaks the exposition;
// the text format asks for "\\" and "\n".
TEST(TextFormat, EscapesBackslashAndNewlineInHelpTextAsTheFormatRequires) {
  std::vector<prometheus::MetricFamily> families(1);
  families[0].name = "g";
  families[0].help = "a \\ b\nc";
  families[0].type = prometheus::MetricType::Gauge;
  families[0].metric.emplace_back();
  std::string ours;
  write_text(families, ours);
  EXPECT_EQ(ours, "# HELP g a \\\\ b\\nc\n# TYPE g gauge\ng 0\n");
}

}  // namespace
}  // namespace gym::exporter
