// The reader's series table (series_table.h).
#include "reader/series_table.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <string_view>

#include "gym/contract.h"

namespace gym::reader_internal {

namespace {
// Multiplies and folds the product's halves (as wyhash's mix does).
uint64_t mix(uint64_t a, uint64_t b) {
  const unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}
constexpr uint64_t kOdd = 0x9e3779b97f4a7c15;  // 2^64 / the golden ratio, odd
}  // namespace

void IdentityHash::add(const void* bytes, size_t n) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w, kOdd);
  }
  uint64_t tail = 0;  // the last bytes and how many: "ab" + "c" is not "a" + "bc"
  std::memcpy(&tail, p, n);
  h = mix(h ^ tail ^ (uint64_t{n} << 56), kOdd ^ 0xff);
}

uint64_t identity_hash(const segment::Record& rec, uint64_t seed) {
  IdentityHash h{seed};
  h.add(&rec.kind, sizeof rec.kind);
  h.add(rec.text, std::min<size_t>(rec.text_bytes, sizeof rec.text));
  h.add(rec.bounds, sizeof(int64_t) * std::min<size_t>(rec.bound_count, std::size(rec.bounds)));
  h.add(&rec.unit_divisor, sizeof rec.unit_divisor);
  h.add(&rec.native_words, sizeof rec.native_words);
  return h.h;
}

bool same_identity(const SeriesInfo& info, const segment::Record& rec) {
  if (info.kind != static_cast<segment::SeriesKind>(rec.kind) ||
      info.labels.size() != rec.label_count || info.bounds.size() != rec.bound_count ||
      std::memcmp(&info.unit_divisor, &rec.unit_divisor, sizeof rec.unit_divisor) != 0 ||
      info.native_words != rec.native_words ||
      !std::equal(info.bounds.begin(), info.bounds.end(), rec.bounds))
    return false;
  // "family\0", then the labels' "name\0value\0" text (a name holds no NUL).
  const std::string_view text(rec.text, std::min<size_t>(rec.text_bytes, sizeof rec.text));
  const size_t n = info.family.size();
  return text.size() > n && text.starts_with(info.family) && text[n] == '\0' &&
         text.substr(n + 1) == info.labels.text();
}

SeriesTable::SeriesTable() {
  if (::getrandom(&seed_, sizeof seed_, GRND_NONBLOCK) != ssize_t{sizeof seed_})
    seed_ = reinterpret_cast<uintptr_t>(this) ^ kOdd;
}

bool SeriesTable::fits_its_family(const SeriesInfo& info) const {
  auto fam = families_.find(std::string(info.family));
  if (fam == families_.end()) return true;
  const FamilyShape& f = fam->second;
  return f.kind == info.kind && f.bounds == info.bounds && f.unit_divisor == info.unit_divisor &&
         f.native_words == info.native_words;
}

uint32_t SeriesTable::add(uint64_t hash, std::unique_ptr<SeriesInfo> info, int64_t now_ns) {
  auto family = families_.find(std::string(info->family));
  if (family == families_.end()) {
    family = families_
                 .emplace(std::string(info->family),
                          FamilyShape{info->kind, info->bounds, info->unit_divisor,
                                      info->native_words, static_cast<uint32_t>(families_.size())})
                 .first;
    by_number_.push_back(&family->second);
  }
  const uint32_t number = family->second.number;
  info->family = family->first;  // a node's key: it stays put
  bool is_identity = false;
  if (info->family == family::kServerIdentity)
    for (const auto& [k, v] : info->labels) is_identity |= k == label::kServerName && !v.empty();
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
    infos_[id] = std::move(info);
  } else {
    id = static_cast<uint32_t>(infos_.size());
    infos_.push_back(std::move(info));
    family_of_.push_back(0);
    hashes_.push_back(0);
    refs_.push_back(0);
    last_change_.push_back(0);
    identity_.push_back(0);
  }
  family_of_[id] = number;
  refs_[id] = 0;
  last_change_[id] = now_ns;
  identity_[id] = is_identity;
  hashes_[id] = hash;
  ids_.emplace(hash, id);
  ++live_;
  order_dirty_ = true;
  return id;
}

void SeriesTable::forget(uint32_t id) {
  const auto [from, to] = ids_.equal_range(hashes_[id]);
  for (auto it = from; it != to; ++it)
    if (it->second == id) {
      ids_.erase(it);
      break;
    }
  infos_[id].reset();
  identity_[id] = 0;
  free_ids_.push_back(id);
  --live_;
  order_dirty_ = true;
}

const std::vector<uint32_t>& SeriesTable::order(bool& changed) {
  changed = order_dirty_;
  if (!order_dirty_) return order_;
  order_.clear();
  for (uint32_t i = 0; i < infos_.size(); ++i)
    if (infos_[i]) order_.push_back(i);
  std::sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
    const SeriesInfo& x = *infos_[a];
    const SeriesInfo& y = *infos_[b];
    if (x.family != y.family) return x.family < y.family;
    return x.labels < y.labels;
  });
  order_dirty_ = false;
  return order_;
}

}  // namespace gym::reader_internal
