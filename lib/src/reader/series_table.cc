// The reader's series table (series_table.h).
#include "reader/series_table.h"

#include <algorithm>

#include "gym/contract.h"

namespace gym::reader_internal {

std::optional<uint32_t> SeriesTable::find(const std::string& key) const {
  auto it = ids_.find(key);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

bool SeriesTable::fits_its_family(const SeriesInfo& info) const {
  auto fam = families_.find(info.family);
  if (fam == families_.end()) return true;
  const FamilyShape& f = fam->second;
  return f.kind == info.kind && f.bounds == info.bounds && f.unit_divisor == info.unit_divisor &&
         f.native_words == info.native_words;
}

uint32_t SeriesTable::add(std::string key, std::unique_ptr<SeriesInfo> info, int64_t now_ns) {
  auto family = families_.find(info->family);
  if (family == families_.end()) {
    family = families_
                 .emplace(info->family,
                          FamilyShape{info->kind, info->bounds, info->unit_divisor,
                                      info->native_words, static_cast<uint32_t>(families_.size())})
                 .first;
    by_number_.push_back(&family->second);
  }
  const uint32_t number = family->second.number;
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
    keys_.push_back(nullptr);
    refs_.push_back(0);
    last_change_.push_back(0);
    identity_.push_back(0);
  }
  family_of_[id] = number;
  refs_[id] = 0;
  last_change_[id] = now_ns;
  identity_[id] = is_identity;
  keys_[id] = &ids_.emplace(std::move(key), id).first->first;
  ++live_;
  order_dirty_ = true;
  return id;
}

void SeriesTable::forget(uint32_t id) {
  ids_.erase(ids_.find(*keys_[id]));
  keys_[id] = nullptr;
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
