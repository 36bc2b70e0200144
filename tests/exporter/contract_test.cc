// The contract table (contract/table.h): families built from its rows stay
// put and carry them, a name without a row is a violation, every registry
// family and label has one OpenTelemetry name both ways, and
// docs/metrics.md holds exactly its rows. (That a name without a row does
// not compile: compile/family_row.cc.)
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "contract/families.h"
#include "contract/table.h"
#include "gym/contract.h"

namespace gym::exporter {
namespace {

TEST(Families, AFamilyStaysWhereItIsWhileHundredsMoreAreAdded) {
  // Collectors hold add_family's references while they add the rest; under
  // AddressSanitizer a family that moved would be a use after free here.
  Families out;
  Family& first = add_family(out, "gym_server_up");
  for (int i = 0; i < 500; ++i) add_family(out, family::kConcurrencyLimit);
  add_metric(first, {{"nemo_gym_server_name", "a"}}).gauge.value = 1;
  EXPECT_EQ(&out.front(), &first);
  ASSERT_EQ(out.front().metric.size(), 1u);
  EXPECT_EQ(out.front().metric[0].gauge.value, 1);
  EXPECT_EQ(first.spec, find_family("gym_server_up"));
  EXPECT_EQ(out.back().spec, find_family(family::kConcurrencyLimit));
  EXPECT_EQ(contract_violation(first), "");
}

TEST(Families, ARowFoundAtRunTimeMayBeNoneAndIsThenAViolation) {
  Families out;
  Family& known = add_family(out, Row::named(std::string("gym_server_up")));
  EXPECT_EQ(known.spec, find_family("gym_server_up"));
  Family& unknown = add_family(out, Row::named(std::string("gym_no_such_family")));
  EXPECT_EQ(unknown.spec, nullptr);
  EXPECT_EQ(unknown.type, prometheus::MetricType::Untyped);
  EXPECT_EQ(contract_violation(unknown),
            "family gym_no_such_family has no row in the contract table");
  unknown.spec = known.spec;  // a family that carries another's row
  EXPECT_EQ(contract_violation(unknown),
            "family gym_no_such_family carries the row of gym_server_up");
}

// docs/metrics.md's table of families: one row per row of the contract table,
// with the same type, unit, label names and HELP.
TEST(Docs, TheMetricReferenceHoldsExactlyTheContractTable) {
  std::ifstream doc(GYM_METRICS_DOC);
  ASSERT_TRUE(doc) << GYM_METRICS_DOC;
  std::map<std::string, std::string> documented;
  std::string line;
  bool in_families = false;
  while (std::getline(doc, line)) {
    if (line.rfind("## ", 0) == 0) in_families = line == "## Families";
    if (!in_families || line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    documented[line.substr(3, end - 3)] = line;
  }
  const char* types[] = {"counter", "gauge", "histogram"};
  for (const FamilySpec& row : kFamilies) {
    std::string labels;
    for (std::string_view l : row.labels)
      if (!l.empty()) labels += (labels.empty() ? "`" : ", `") + std::string(l) + "`";
    const std::string want = "| `" + std::string(row.name) + "` | " +
                             types[static_cast<int>(row.type)] + " | " + std::string(row.unit) +
                             " | " + labels + " | " + std::string(row.help) + " |";
    auto it = documented.find(std::string(row.name));
    if (it == documented.end()) {
      ADD_FAILURE() << row.name << " is not in docs/metrics.md; add: " << want;
      continue;
    }
    EXPECT_EQ(it->second, want);
    documented.erase(it);
  }
  for (const auto& [name, _] : documented)
    ADD_FAILURE() << name
                  << " is documented but has no row in the contract table (contract/table.h)";
}

TEST(OtelNames, EveryRegistryFamilyAndLabelHasOneBothWaysAndNoTwoShareIt) {
  std::set<std::string_view> otel_families, otel_labels;
  for (const FamilySpec& f : kFamilies) {
    const std::string_view otel = otel_family_name(f.name);
    if (f.source == Source::kRegistry) {
      EXPECT_NE(otel, f.name) << f.name;
      EXPECT_TRUE(otel.starts_with("gym.")) << otel;
      EXPECT_EQ(otel.ends_with("_total"), f.name.ends_with("_total")) << otel;
      EXPECT_FALSE(otel.ends_with("seconds")) << "OpenTelemetry names carry no unit: " << otel;
      for (std::string_view l : f.labels) {
        if (l.empty()) continue;
        EXPECT_NE(otel_label_name(l), l) << l;
        EXPECT_EQ(prometheus_label_name(otel_label_name(l)), l);
        otel_labels.insert(otel_label_name(l));
      }
    }
    EXPECT_EQ(prometheus_family_name(otel), f.name) << "back again";
    EXPECT_TRUE(otel_families.insert(otel).second) << "two families named " << otel;
  }
  EXPECT_EQ(std::count_if(std::begin(kFamilies), std::end(kFamilies),
                          [](const FamilySpec& f) { return !f.otel.empty(); }),
            25);
  EXPECT_EQ(otel_family_name(family::kConcurrencyLimit), "gym.concurrency.limit");
  EXPECT_EQ(otel_family_name(family::kOperationDuration), "gym.resources.operation.duration");
  EXPECT_EQ(otel_label_name(label::kLimitName), "nemo.gym.concurrency.limit_name");
  EXPECT_EQ(otel_label_name(label::kOutcome), "nemo.gym.resources.operation.outcome");
  EXPECT_EQ(otel_family_name("gym_server_memory_bytes"), "gym_server_memory_bytes")
      << "not in the seeds: its name";
}

}  // namespace
}  // namespace gym::exporter
