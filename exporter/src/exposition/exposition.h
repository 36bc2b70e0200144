// The exposition: the collectors' families, checked against the contract
// table, rendered by one encoder per format (text.h: the text format 0.0.4).
// A family that breaks the table is not served; it is logged once and
// counted in gym_exporter_contract_violations_total (a test asserts there is none).
//
// Thread-safety: render() may be called from any number of threads; the
// collectors are called under one lock, one scrape at a time.
#pragma once

#include <prometheus/metric_family.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "collector.h"
#include "exposition/escaping.h"

namespace gym::exporter {

// One format: appends families to a buffer.
class Encoder {
 public:
  virtual ~Encoder() = default;
  virtual std::string_view content_type() const = 0;
  // A short name for logs ("text", "openmetrics", "protobuf").
  virtual std::string_view name() const = 0;
  // `extras`: null when the family has none; an encoder without a place for
  // them ignores them.
  virtual void family(const Family& f, const FamilyExtras* extras, std::string& out) const = 0;
  virtual void finish(std::string& /*out*/) const {}
  // Whether a family may be written in parts (the text formats: its lines
  // are lines; not protobuf, whose family is one message), and a part: the
  // samples [from, to), the family's metadata first when from is 0.
  virtual bool splits() const { return false; }
  virtual void family_part(const Family& f, const FamilyExtras* extras, size_t /*from*/,
                           size_t /*to*/, std::string& out) const {
    family(f, extras, out);
  }
  // How it names families and labels (escaping.h): the exposition renames
  // them for it when it is not the legacy names (underscores).
  virtual Escaping escaping() const { return Escaping::kUnderscores; }
};

class Exposition {
 public:
  explicit Exposition(std::vector<std::unique_ptr<Collector>> collectors, Log log = {});
  // Stops the collectors.
  ~Exposition();
  // Starts every collector (the first samples).
  void start();
  // Stops every collector (their final samples) while scrapes go on; call
  // it from the thread that calls replace().
  void stop();
  // One exposition built now, in the text format or the given encoder's.
  std::string render();
  // `names`: when not empty, only the families asked for by name (a
  // histogram also by its _bucket, _sum or _count), as the name[] query
  // parameter of client_python's exporters.
  std::string render(const Encoder& encoder, const std::set<std::string>& names = {});
  // The same exposition handed to `to` in pieces as it is rendered (kPiece
  // bytes or more each, the last one less), so that it is never held whole:
  // the buffer holds a piece and a part of a family (kPartSeries samples of
  // a text format's family; a protobuf family whole). `to` runs under the
  // scrape's lock: it must not wait. Returns the bytes rendered.
  using Pieces = std::function<void(std::string_view)>;
  static constexpr size_t kPiece = size_t{64} << 10;
  static constexpr size_t kPartSeries = 64;
  size_t render(const Encoder& encoder, const std::set<std::string>& names, const Pieces& to);
  // One round of every collector's work now, without starting them (--once).
  void refresh();
  // Swaps the collectors (a reload): stops the old ones, starts the new.
  void replace(std::vector<std::unique_ptr<Collector>> collectors);
  // Families not served because they break the contract table, so far.
  size_t violations() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Collector>> collectors_;
  Log log_;
  std::set<std::string> reported_;  // families whose violation was logged
  size_t violations_ = 0;
  size_t last_size_ = 0;  // to size the next exposition's buffer
  // The buffer pieces are rendered into, kept from one scrape to the next
  // (up to kKeptBuffer) so that a scrape writes into memory already there.
  std::string pieces_;
  static constexpr size_t kKeptBuffer = size_t{2} << 20;
  void add_own_families(const Encoder& encoder, const std::set<std::string>& names,
                        std::chrono::duration<double> took, std::string& out);
  // Renders into `whole`, or into pieces_ handed to `to` at each kPiece.
  size_t render_into(const Encoder& encoder, const std::set<std::string>& asked, std::string* whole,
                     const Pieces* to);
};

}  // namespace gym::exporter
