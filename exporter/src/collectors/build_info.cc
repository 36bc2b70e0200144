// gym_exporter_build_info: the exporter's version and revision.
#include "build_info.h"
#include "collector.h"
#include "contract/families.h"

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

GYM_REGISTER_COLLECTOR(plain_kind<BuildInfoCollector>("build_info", 90));

}  // namespace
}  // namespace gym::exporter
