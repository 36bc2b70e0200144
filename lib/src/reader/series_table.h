// The reader's series table: each series a reader has seen, interned once by
// its record's identity (kind, name and labels, buckets, divisor), with an
// id for its life; an expired series' id is reused by the next new one. The
// identity is kept as the series' SeriesInfo and found by its hash (seeded
// per table, so that a writer cannot choose names that all collide), not
// as a second copy of its text.
// What the reader keeps per id of its own (values, limits, exemplars) lives
// in its vectors, which it grows when add() returns a new id.
//
// Thread-safety: none; one reader's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gym/registry_reader.h"
#include "gym/segment_format.h"

namespace gym::reader_internal {

// A hash of bytes, a word at a time, from a seed: the identity of a series
// (kind, text, buckets, divisor, native words), added part by part.
struct IdentityHash {
  uint64_t h;
  void add(const void* bytes, size_t n);
};

// What makes two records one series: kind, text, buckets, divisor, native
// words. Hashed (a record validated: its text the family name and its
// labels' names and values, each ended by a NUL) ...
uint64_t identity_hash(const segment::Record& rec, uint64_t seed);
// ... and compared with a series interned.
bool same_identity(const SeriesInfo& info, const segment::Record& rec);

class SeriesTable {
 public:
  SeriesTable();
  // The seed of identity hashes (IdentityHash) for this table.
  uint64_t seed() const { return seed_; }
  // The id of the series whose identity hashes to `hash` and for whose
  // SeriesInfo `same` is true, if interned.
  template <class Same>
  std::optional<uint32_t> find(uint64_t hash, Same&& same) const {
    const auto [from, to] = ids_.equal_range(hash);
    for (auto it = from; it != to; ++it)
      if (same(*infos_[it->second])) return it->second;
    return std::nullopt;
  }
  // False when a series of `info`'s family was seen with another kind,
  // other buckets, another divisor or other native words.
  bool fits_its_family(const SeriesInfo& info) const;
  // Interns a series not found, with its identity's hash; its family's
  // shape is known from then on, and its name kept here once (info->family
  // views it from then on). Returns its id: a freed one, or size() - 1
  // when the table grew.
  uint32_t add(uint64_t hash, std::unique_ptr<SeriesInfo> info, int64_t now_ns);
  // Forgets a series; its id is free for the next.
  void forget(uint32_t id);

  size_t size() const { return infos_.size(); }  // ids, used or free
  size_t live() const { return live_; }
  // The series of `id`, or nullptr when the id is free.
  const SeriesInfo* info(uint32_t id) const { return infos_[id].get(); }
  // What every series of a family shares (fits_its_family), and the
  // family's number (SeriesSample::family), in the order families were
  // first seen.
  struct FamilyShape {
    segment::SeriesKind kind;
    std::vector<int64_t> bounds;
    double unit_divisor;
    uint16_t native_words;
    uint32_t number;
  };
  // What a snapshot reads of a series on every read, kept apart from its
  // SeriesInfo (a block of its own, read only when the series is new or
  // the order changes): its family's number, and by it the family's shape.
  uint32_t family(uint32_t id) const { return family_of_[id]; }
  const FamilyShape& family_shape(uint32_t number) const { return *by_number_[number]; }
  // A declared server's identity series (gym_server_identity with a server
  // name): marked once, when interned.
  bool identity(uint32_t id) const { return identity_[id] != 0; }
  // Records of open segments naming the series.
  uint32_t& refs(uint32_t id) { return refs_[id]; }
  // When its folded total last changed (Unix ns).
  int64_t& last_change(uint32_t id) { return last_change_[id]; }

  // The ids of live series, by family, then labels. `changed`: sorted again
  // (a series was added or forgotten since the last call).
  const std::vector<uint32_t>& order(bool& changed);

 private:
  uint64_t seed_;
  std::unordered_multimap<uint64_t, uint32_t> ids_;  // identity hash -> ids
  std::vector<std::unique_ptr<SeriesInfo>> infos_;
  std::vector<uint32_t> family_of_;  // id -> its family's number
  std::vector<uint64_t> hashes_;     // id -> its identity hash
  std::vector<uint32_t> refs_;
  std::vector<int64_t> last_change_;
  std::vector<uint8_t> identity_;
  std::vector<uint32_t> free_ids_;
  size_t live_ = 0;
  std::unordered_map<std::string, FamilyShape> families_;
  std::vector<const FamilyShape*> by_number_;  // nodes of families_: they stay put
  std::vector<uint32_t> order_;
  bool order_dirty_ = false;
};

}  // namespace gym::reader_internal
