// Fuzz target: the exporter's configuration loader on arbitrary YAML. It must
// report errors, never crash or hang.
#include <cstdint>
#include <string>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  gym::exporter::ConfigResult r = gym::exporter::parse_config(text, "fuzz.yml");
  if (r.ok()) {
    (void)gym::exporter::validate(r.config, "fuzz");
  }
  return 0;
}
