#include "gym/series_labels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace gym {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

Pairs read_back(const SeriesLabels& labels) {
  Pairs out;
  for (const auto& [name, value] : labels) out.emplace_back(name, value);
  return out;
}

TEST(SeriesLabels, ReadsBackEachLabelAsGivenEmptyValuesAndNoLabelsIncluded) {
  const std::vector<Pairs> cases = {
      {},
      {{"operation", "verify"}},
      {{"executor", ""}, {"nemo_gym_server_name", "math_with_judge_resources_server"}},
      {{"a", "1"}, {"b", ""}, {"c", "a value longer than fifteen bytes"}},
  };
  for (const Pairs& pairs : cases) {
    const SeriesLabels labels = SeriesLabels::from(pairs);
    EXPECT_EQ(read_back(labels), pairs);
    EXPECT_EQ(labels.size(), pairs.size());
    EXPECT_EQ(labels.empty(), pairs.empty());
    EXPECT_TRUE(labels == pairs);
    for (size_t i = 0; i < pairs.size(); ++i) {
      EXPECT_EQ(labels[i].first, pairs[i].first);
      EXPECT_EQ(labels[i].second, pairs[i].second);
    }
    std::string text;
    for (const auto& [name, value] : pairs) text += name + '\0' + value + '\0';
    EXPECT_EQ(labels.text(), text);
    EXPECT_TRUE(SeriesLabels::from_text(text, uint32_t(pairs.size())) == labels);
  }
}

TEST(SeriesLabels, DiffersFromPairsThatDifferInAnyNameValueOrCount) {
  const SeriesLabels labels = SeriesLabels::from(Pairs{{"a", "x"}, {"b", "y"}});
  EXPECT_FALSE(labels == (Pairs{{"a", "x"}}));
  EXPECT_FALSE(labels == (Pairs{{"a", "x"}, {"b", "y"}, {"c", "z"}}));
  EXPECT_FALSE(labels == (Pairs{{"a", "x"}, {"b", "yy"}}));
  EXPECT_FALSE(labels == (Pairs{{"a", "x"}, {"c", "y"}}));
  EXPECT_FALSE(labels == SeriesLabels::from(Pairs{{"a", "x"}, {"b", "yz"}}));
}

// Sorting series by their labels must give the order it gave when labels
// were vectors of string pairs: prefixes first, names before values.
TEST(SeriesLabels, OrdersAsTheListsOfPairsOrder) {
  const std::vector<Pairs> lists = {
      {},
      {{"a", ""}},
      {{"a", "x"}},
      {{"a", "x"}, {"b", "y"}},
      {{"a", "xy"}},
      {{"a", "y"}},
      {{"ab", ""}},
      {{"a", "x"}, {"bb", ""}},
      {{"b", "a"}},
      {{"a", "x"}, {"b", "y"}, {"c", "z"}},
      {{"a", "x"}, {"b", ""}},
  };
  for (const Pairs& x : lists)
    for (const Pairs& y : lists) {
      const SeriesLabels lx = SeriesLabels::from(x), ly = SeriesLabels::from(y);
      EXPECT_EQ(lx < ly, x < y) << read_back(lx).size() << " vs " << read_back(ly).size();
      EXPECT_EQ(lx == ly, x == y);
    }
}

TEST(SeriesLabels, ACopyKeepsItsOwnText) {
  auto original = std::make_unique<SeriesLabels>(
      SeriesLabels::from(Pairs{{"nemo_gym_concurrency_limit_name", "rollouts"}}));
  SeriesLabels copy = *original;
  SeriesLabels assigned;
  assigned = *original;
  original.reset();
  EXPECT_EQ(read_back(copy), (Pairs{{"nemo_gym_concurrency_limit_name", "rollouts"}}));
  EXPECT_TRUE(assigned == copy);
  SeriesLabels moved = std::move(copy);
  EXPECT_EQ(read_back(moved), (Pairs{{"nemo_gym_concurrency_limit_name", "rollouts"}}));
  EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): what a move leaves
  EXPECT_EQ(copy.begin(), copy.end());
  assigned = std::move(moved);
  EXPECT_EQ(assigned.size(), 1u);
  EXPECT_TRUE(moved.empty());  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace gym
