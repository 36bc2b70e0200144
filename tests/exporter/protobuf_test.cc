// The protobuf encoder (exposition/protobuf.h), read back by a decoder of
// the wire format written here from the protobuf encoding document and
// io.prometheus.client's metrics.proto, not from the encoder: the
// delimited framing, each family's name, HELP, type and unit, labels and
// values of every type, created timestamps, classic buckets, native
// buckets as spans and deltas, exemplars.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "collector.h"
#include "contract/families.h"
#include "exposition/protobuf.h"
#include "gym/native_histogram.h"
#include "gym/registry_reader.h"

namespace gym::exporter {
namespace {

using prometheus::ClientMetric;

// One field of a message: its number, and its varint, its fixed64 bits or
// its bytes (length-delimited), by wire type 0, 1 or 2.
struct Field {
  uint32_t number = 0;
  uint32_t wire = 0;
  uint64_t value = 0;
  std::string bytes;
  double as_double() const {
    double d;
    std::memcpy(&d, &value, sizeof d);
    return d;
  }
};

uint64_t read_varint(std::string_view& in) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= uint64_t(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return v;
  }
  ADD_FAILURE() << "a varint runs off the end";
  return v;
}

int64_t unzigzag(uint64_t v) {
  return int64_t(v >> 1) ^ -int64_t(v & 1);
}

std::vector<Field> fields_of(std::string_view in) {
  std::vector<Field> out;
  while (!in.empty()) {
    Field f;
    const uint64_t key = read_varint(in);
    f.number = uint32_t(key >> 3);
    f.wire = uint32_t(key & 7);
    if (f.wire == 0) {
      f.value = read_varint(in);
    } else if (f.wire == 1 && in.size() >= 8) {
      std::memcpy(&f.value, in.data(), 8);
      in.remove_prefix(8);
    } else if (f.wire == 2) {
      const uint64_t n = read_varint(in);
      if (n > in.size()) {
        ADD_FAILURE() << "a field longer than its message";
        return out;
      }
      f.bytes = std::string(in.substr(0, n));
      in.remove_prefix(n);
    } else {
      ADD_FAILURE() << "wire type " << f.wire;
      return out;
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Field> all(const std::vector<Field>& fs, uint32_t number) {
  std::vector<Field> out;
  for (const Field& f : fs)
    if (f.number == number) out.push_back(f);
  return out;
}

std::optional<Field> one(const std::vector<Field>& fs, uint32_t number) {
  const std::vector<Field> got = all(fs, number);
  if (got.size() > 1) ADD_FAILURE() << "field " << number << " " << got.size() << " times";
  if (got.empty()) return std::nullopt;
  return got[0];
}

// Length-prefixed messages of a delimited stream.
std::vector<std::string> messages_of(std::string_view stream) {
  std::vector<std::string> out;
  while (!stream.empty()) {
    const uint64_t n = read_varint(stream);
    if (n > stream.size()) {
      ADD_FAILURE() << "a message longer than the stream";
      break;
    }
    out.emplace_back(stream.substr(0, n));
    stream.remove_prefix(n);
  }
  return out;
}

std::map<std::string, std::string> labels_of(const std::vector<Field>& metric) {
  std::map<std::string, std::string> out;
  for (const Field& pair : all(metric, 1)) {
    const std::vector<Field> p = fields_of(pair.bytes);
    out[one(p, 1).value().bytes] = one(p, 2).value().bytes;
  }
  return out;
}

// A google.protobuf.Timestamp as seconds and nanos.
std::pair<uint64_t, uint64_t> timestamp_of(const Field& f) {
  const std::vector<Field> t = fields_of(f.bytes);
  const std::optional<Field> nanos = one(t, 2);
  return {one(t, 1).value().value, nanos ? nanos->value : 0};
}

std::string encode(const Family& f, const FamilyExtras* extras = nullptr) {
  std::string out;
  write_family_protobuf(f, extras, out);
  return out;
}

TEST(Protobuf, EachFamilyIsOneDelimitedMessageWithItsNameHelpTypeAndUnit) {
  Families fs;
  auto [up, admissions, duration] = add_families(
      fs, {"gym_server_up", family::kConcurrencyAdmissions, family::kOperationDuration});
  std::string stream;
  for (const Family& f : fs) write_family_protobuf(f, nullptr, stream);
  const std::vector<std::string> messages = messages_of(stream);
  ASSERT_EQ(messages.size(), 3u);
  const struct {
    const Family* family;
    uint64_t type;  // io.prometheus.client.MetricType
    const char* unit;
  } want[] = {{up, 1, nullptr}, {admissions, 0, nullptr}, {duration, 4, "seconds"}};
  for (size_t i = 0; i < 3; ++i) {
    const std::vector<Field> m = fields_of(messages[i]);
    EXPECT_EQ(one(m, 1).value().bytes, want[i].family->name);
    EXPECT_EQ(one(m, 2).value().bytes, std::string(want[i].family->spec->help));
    EXPECT_EQ(one(m, 3).value().value, want[i].type) << want[i].family->name;
    const std::optional<Field> unit = one(m, 5);
    if (want[i].unit == nullptr)
      EXPECT_FALSE(unit.has_value()) << want[i].family->name;
    else
      EXPECT_EQ(unit.value().bytes, want[i].unit);
    EXPECT_TRUE(all(m, 4).empty()) << "no samples, no Metric";
  }
}

TEST(Protobuf, GaugesAndCountersCarryTheirLabelsValuesAndCreatedTimestamps) {
  Families fs;
  auto [up, admissions] = add_families(fs, {"gym_server_up", family::kConcurrencyAdmissions});
  add_metric(*up, {{"nemo_gym_server_name", "math"}, {"nemo_gym_server_type", "resources_server"}})
      .gauge.value = 1;
  add_metric(*up, {{"nemo_gym_server_name", "ünïcode \"q\""}}).gauge.value = -0.5;
  add_metric(*admissions, {{"nemo_gym_concurrency_limit_name", "a"}}).counter.value = 7;
  add_metric(*admissions, {{"nemo_gym_concurrency_limit_name", "b"}}).counter.value = 1e15;
  FamilyExtras created;
  created.created = {1700000000.25, 0};  // the second: not known
  const std::vector<Field> gauges = fields_of(messages_of(encode(*up)).at(0));
  const std::vector<Field> g = all(gauges, 4);
  ASSERT_EQ(g.size(), 2u);
  const std::vector<Field> g0 = fields_of(g[0].bytes), g1 = fields_of(g[1].bytes);
  EXPECT_EQ(labels_of(g0),
            (std::map<std::string, std::string>{{"nemo_gym_server_name", "math"},
                                                {"nemo_gym_server_type", "resources_server"}}));
  EXPECT_EQ(labels_of(g1).at("nemo_gym_server_name"), "ünïcode \"q\"") << "bytes as they are";
  EXPECT_EQ(one(fields_of(one(g0, 2).value().bytes), 1).value().as_double(), 1.0);
  EXPECT_EQ(one(fields_of(one(g1, 2).value().bytes), 1).value().as_double(), -0.5);
  EXPECT_FALSE(one(g0, 3).has_value()) << "a gauge is no counter";

  const std::vector<Field> counters = fields_of(messages_of(encode(*admissions, &created)).at(0));
  const std::vector<Field> c = all(counters, 4);
  ASSERT_EQ(c.size(), 2u);
  const std::vector<Field> c0 = fields_of(one(fields_of(c[0].bytes), 3).value().bytes);
  const std::vector<Field> c1 = fields_of(one(fields_of(c[1].bytes), 3).value().bytes);
  EXPECT_EQ(one(c0, 1).value().as_double(), 7.0);
  EXPECT_EQ(one(c1, 1).value().as_double(), 1e15);
  EXPECT_EQ(timestamp_of(one(c0, 3).value()),
            std::make_pair(uint64_t{1700000000}, uint64_t{250000000}));
  EXPECT_FALSE(one(c1, 3).has_value()) << "an unknown start is left out, not zero";
}

TEST(Protobuf, AHistogramsBucketsAreCumulativeWithTheirBoundsCountSumAndCreated) {
  Families fs;
  Family& d = add_family(fs, family::kOperationDuration);
  ClientMetric& m = add_metric(d, {{"nemo_gym_resources_operation", "verify"}});
  const double bounds[] = {0.005, 0.1, std::numeric_limits<double>::infinity()};
  const uint64_t cumulative[] = {2, 5, 9};
  for (size_t b = 0; b < 3; ++b) {
    ClientMetric::Bucket bucket;
    bucket.upper_bound = bounds[b];
    bucket.cumulative_count = cumulative[b];
    m.histogram.bucket.push_back(bucket);
  }
  m.histogram.sample_count = 9;
  m.histogram.sample_sum = 12.5;
  FamilyExtras extras;
  extras.created = {1700000001.0};
  const std::vector<Field> metric =
      fields_of(one(fields_of(messages_of(encode(d, &extras)).at(0)), 4).value().bytes);
  const std::vector<Field> h = fields_of(one(metric, 7).value().bytes);
  EXPECT_EQ(one(h, 1).value().value, 9u);
  EXPECT_EQ(one(h, 2).value().as_double(), 12.5);
  const std::vector<Field> buckets = all(h, 3);
  ASSERT_EQ(buckets.size(), 3u);
  for (size_t b = 0; b < 3; ++b) {
    const std::vector<Field> bucket = fields_of(buckets[b].bytes);
    EXPECT_EQ(one(bucket, 1).value().value, cumulative[b]);
    EXPECT_EQ(one(bucket, 2).value().as_double(), bounds[b]);
    EXPECT_FALSE(one(bucket, 3).has_value()) << "no exemplar given";
  }
  EXPECT_EQ(timestamp_of(one(h, 15).value()), std::make_pair(uint64_t{1700000001}, uint64_t{0}));
  EXPECT_FALSE(one(h, 5).has_value()) << "no native counts given: no schema";
}

// The native counts of a Histogram message: each span's first key (relative
// to the end of the one before), each count as the difference from the one
// before it, by key.
std::map<int32_t, uint64_t> native_counts_of(const std::vector<Field>& h) {
  std::map<int32_t, uint64_t> out;
  std::vector<int64_t> deltas;
  if (std::optional<Field> packed = one(h, 13)) {
    std::string_view in = packed->bytes;
    while (!in.empty()) deltas.push_back(unzigzag(read_varint(in)));
  }
  size_t d = 0;
  int64_t count = 0;
  int32_t key = 0;
  bool first = true;
  for (const Field& span : all(h, 12)) {
    const std::vector<Field> s = fields_of(span.bytes);
    const std::optional<Field> offset = one(s, 1);
    key = (first ? 0 : key) + int32_t(offset ? unzigzag(offset->value) : 0);
    first = false;
    const uint64_t length = one(s, 2) ? one(s, 2)->value : 0;
    for (uint64_t i = 0; i < length; ++i, ++key) {
      if (d >= deltas.size()) {
        ADD_FAILURE() << "fewer deltas than the spans hold";
        return out;
      }
      count += deltas[d++];
      out[key] = uint64_t(count);
    }
  }
  EXPECT_EQ(d, deltas.size()) << "as many deltas as the spans hold";
  return out;
}

TEST(Protobuf, NativeCountsComeBackFromTheSpansAndDeltasWithTheSchemaAndZeroBucket) {
  Families fs;
  Family& d = add_family(fs, family::kOperationDuration);
  add_metric(d, {{"nemo_gym_resources_operation", "a"}});
  add_metric(d, {{"nemo_gym_resources_operation", "b"}});
  std::vector<uint64_t> counts(native::kWords, 0), none(native::kWords, 0);
  counts[0] = 3;  // the zero bucket
  // Two runs of keys with a gap, counts rising and falling, and the last key.
  const std::map<uint32_t, uint64_t> used = {{10, 4}, {11, 1}, {12, 9},
                                             {40, 2}, {41, 2}, {native::kWords - 1, 5}};
  for (const auto& [w, c] : used) counts[w] = c;
  none[0] = 1;
  FamilyExtras extras;
  extras.native = {counts, none};
  const std::vector<Field> family = fields_of(messages_of(encode(d, &extras)).at(0));
  const std::vector<Field> metrics = all(family, 4);
  ASSERT_EQ(metrics.size(), 2u);
  const std::vector<Field> h = fields_of(one(fields_of(metrics[0].bytes), 7).value().bytes);
  EXPECT_EQ(unzigzag(one(h, 5).value().value), native::kSchema);
  EXPECT_EQ(one(h, 6).value().as_double(), native::kZeroThreshold);
  EXPECT_EQ(one(h, 7).value().value, 3u);
  std::map<int32_t, uint64_t> want;
  for (const auto& [w, c] : used) want[native::key_of(w)] = c;
  EXPECT_EQ(native_counts_of(h), want);
  EXPECT_EQ(all(h, 12).size(), 3u) << "one span a run of keys in use";

  // Nothing but the zero bucket: still native (one span of no buckets).
  const std::vector<Field> h2 = fields_of(one(fields_of(metrics[1].bytes), 7).value().bytes);
  EXPECT_EQ(one(h2, 7).value().value, 1u);
  ASSERT_EQ(all(h2, 12).size(), 1u);
  EXPECT_TRUE(native_counts_of(h2).empty());
  EXPECT_FALSE(one(h2, 13).has_value());
}

TEST(Protobuf, AnExemplarIsOnItsClassicBucketAndAmongTheNativeHistogramsInTheFamilysUnit) {
  Families fs;
  Family& d = add_family(fs, family::kOperationDuration);
  ClientMetric& m = add_metric(d, {{"nemo_gym_resources_operation", "a"}});
  for (double bound : {0.005, std::numeric_limits<double>::infinity()}) {
    ClientMetric::Bucket b;
    b.upper_bound = bound;
    b.cumulative_count = 1;
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = 1;
  Exemplar x;
  x.value = 2000000;  // 2 ms in ns
  x.unix_ns = 1700000002500000000;
  x.trace = TraceContext::from_hex("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331").value();
  const Exemplar exemplars[] = {x, Exemplar{}};  // the +Inf bucket has none
  std::vector<uint64_t> counts(native::kWords, 0);
  counts[native::word_of(0.002)] = 1;
  FamilyExtras extras;
  extras.exemplars = {exemplars};
  extras.exemplar_divisor = 1e9;
  extras.native = {counts};
  const std::vector<Field> h = fields_of(
      one(fields_of(one(fields_of(messages_of(encode(d, &extras)).at(0)), 4).value().bytes), 7)
          .value()
          .bytes);
  auto check = [](const Field& exemplar) {
    const std::vector<Field> e = fields_of(exemplar.bytes);
    EXPECT_EQ(labels_of(e),
              (std::map<std::string, std::string>{{"trace_id", "0af7651916cd43dd8448eb211c80319c"},
                                                  {"span_id", "b7ad6b7169203331"}}));
    EXPECT_DOUBLE_EQ(one(e, 2).value().as_double(), 0.002);
    EXPECT_EQ(timestamp_of(one(e, 3).value()),
              std::make_pair(uint64_t{1700000002}, uint64_t{500000000}));
  };
  const std::vector<Field> buckets = all(h, 3);
  ASSERT_EQ(buckets.size(), 2u);
  const std::optional<Field> first = one(fields_of(buckets[0].bytes), 3);
  ASSERT_TRUE(first.has_value());
  check(*first);
  EXPECT_FALSE(one(fields_of(buckets[1].bytes), 3).has_value());
  const std::vector<Field> native = all(h, 16);
  ASSERT_EQ(native.size(), 1u) << "the native histogram's exemplars: the one there is";
  check(native[0]);
}

}  // namespace
}  // namespace gym::exporter
