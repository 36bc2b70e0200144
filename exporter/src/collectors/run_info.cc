// gym_run_info: the run this exporter serves, as one series of value 1
// whose labels say which run: `run` (run.name, else GYM_RUN),
// `slurm_job_id` and `slurm_step_id` (SLURM_JOB_ID, SLURM_STEP_ID) and
// `ray_cluster` (RAY_CLUSTER_NAME, which KubeRay sets in its pods), each
// from the `run:` section when it sets it. No other series carries them:
// dashboards join on the exporter's instance
// (`* on(instance) group_left(run) gym_run_info`), so that a run does not
// multiply every series (docs/metrics.md).
#include <cstdlib>
#include <map>

#include "collector.h"
#include "contract/families.h"
#include "yaml_reader.h"

namespace gym::exporter {
namespace {

// A label, the key of the run: section that sets it, and the environment
// variable it comes from otherwise.
struct RunLabel {
  const char* label;
  const char* key;
  const char* env;
};
constexpr RunLabel kRunLabels[] = {{"run", "name", "GYM_RUN"},
                                   {"slurm_job_id", "slurm_job_id", "SLURM_JOB_ID"},
                                   {"slurm_step_id", "slurm_step_id", "SLURM_STEP_ID"},
                                   {"ray_cluster", "ray_cluster", "RAY_CLUSTER_NAME"}};

struct RunSettings : CollectorSettings {
  std::map<std::string, std::string> set;  // by key, what the section sets
};

std::shared_ptr<const CollectorSettings> read_run(YamlReader& rd, const YAML::Node& n) {
  auto s = std::make_shared<RunSettings>();
  YamlReader::Keys keys{
      {"enabled", [&](const YAML::Node& v) { rd.boolean(v, "run.enabled", s->enabled); }}};
  for (const RunLabel& l : kRunLabels)
    keys[l.key] = [&rd, s, key = std::string(l.key)](const YAML::Node& v) {
      std::string value;
      if (rd.string(v, "run." + key, value)) s->set[key] = value;
    };
  rd.mapping(n, "run", keys);
  return s;
}

class RunInfoCollector : public Collector {
 public:
  // The identity is read once, when the collector is made (at start and at
  // each reload): the environment does not change under a process.
  explicit RunInfoCollector(const RunSettings& s) {
    for (const RunLabel& l : kRunLabels) {
      const auto set = s.set.find(l.key);
      const char* env = std::getenv(l.env);
      labels_.emplace_back(l.label, set != s.set.end() ? set->second : env != nullptr ? env : "");
    }
  }
  void collect(const Emit& emit) override {
    Families out;
    add_simple(out, "gym_run_info", 1, labels_);
    emit(out.back());
  }

 private:
  LabelPairs labels_;
};

GYM_REGISTER_COLLECTOR((CollectorKind{
    .name = "run",
    .order = 91,
    .parse = read_run,
    .make = [](const CollectorSettings* s, const CollectorContext&) -> std::unique_ptr<Collector> {
      static const RunSettings defaults;
      return std::make_unique<RunInfoCollector>(s != nullptr ? static_cast<const RunSettings&>(*s)
                                                             : defaults);
    }}));

}  // namespace
}  // namespace gym::exporter
