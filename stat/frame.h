// gym-stat's screen as lines of text: the verdict of its window first
// (snapshot/verdict.h: "bottleneck: ..." and its ranked entries, and the
// Little's-law checks that drift), then the registry view (snapshot/view.h)
// with rates, outcome ratios and quantiles over the window since the
// previous view. Both the full-screen view and --once print these lines.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "snapshot/verdict.h"
#include "snapshot/view.h"

namespace gym::stat {

enum class Sort { kSaturation, kQueue, kName };
const char* sort_name(Sort s);

struct FrameOptions {
  Sort sort = Sort::kSaturation;
  std::string filter;  // substring of a row's server, limit, operation or component
  // Lines worth formatting (a screen's height); 0: all.
  size_t max_lines = 0;
};

struct Line {
  enum class Kind { kTitle, kHeader, kRow, kBlank } kind = Kind::kRow;
  std::string text;
  // For limit rows: where the saturation bar is, and how full (0..1).
  size_t bar_at = 0, bar_width = 0;
  double fill = 0;
};

// `previous` may be null (no window yet: rates are shown as "-"); so may
// `verdict` (no verdict lines).
std::vector<Line> frame(const exporter::View& now, const exporter::View* previous,
                        const FrameOptions& options, const exporter::Verdict* verdict = nullptr);
std::string plain(const std::vector<Line>& lines);

}  // namespace gym::stat
