// The exporter's version and revision (set by the build).
#pragma once

namespace gym::exporter {
extern const char* const kVersion;
extern const char* const kRevision;
}  // namespace gym::exporter
