// gym_exporter_build_info: the exporter's version and revision.
#include "build_info.h"
#include "collector.h"
#include "exposition/families.h"

namespace gym::exporter {
namespace {

class BuildInfoCollector : public Collector {
 public:
  void collect(const Emit& emit) override {
    Families out;
    add_simple(out, "gym_exporter_build_info", 1, {{"revision", kRevision}, {"version", kVersion}});
    emit(out.back());
  }
};

GYM_REGISTER_COLLECTOR({.name = "build_info",
                        .order = 90,
                        .parse = nullptr,
                        .make = [](const CollectorSettings*, const CollectorContext&) {
                          return std::make_unique<BuildInfoCollector>();
                        }});

}  // namespace
}  // namespace gym::exporter
