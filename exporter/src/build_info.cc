#include "build_info.h"

#ifndef GYM_EXPORTER_REVISION
#define GYM_EXPORTER_REVISION "unknown"
#endif
#ifndef GYM_EXPORTER_VERSION
#define GYM_EXPORTER_VERSION "0.0.0"
#endif

namespace gym::exporter {
const char* const kVersion = GYM_EXPORTER_VERSION;
const char* const kRevision = GYM_EXPORTER_REVISION;
}  // namespace gym::exporter
