// The Prometheus naming rules the registry enforces on what it stores.
#pragma once

#include <string_view>

namespace gym::detail {

// [a-zA-Z_:][a-zA-Z0-9_:]*, at most segment::kMaxNameBytes.
bool valid_metric_name(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", at most kMaxNameBytes.
bool valid_label_name(std::string_view name);
// Well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): the text formats require it of every label value, so one bad
// value would make a whole exposition invalid.
bool valid_utf8(std::string_view s);

}  // namespace gym::detail
