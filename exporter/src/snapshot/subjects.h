// How the verdict and the Little's-law checks name a row (its labels'
// values joined by '/', "-" for a limit or operation with no server) and
// find it in another View.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "snapshot/view.h"

namespace gym::exporter {

inline std::string subject(const LimitView& l) {
  return (l.server_name.empty() ? "-" : l.server_name) + "/" + l.component + "/" + l.limit_name;
}
inline std::string subject(const OperationView& o) {
  return (o.server_name.empty() ? "-" : o.server_name) + "/" + o.operation + "/" + o.executor;
}

// The row of `rows` with `key` (LimitView::key(), OperationView::key()).
template <class T>
const T* row_with_key(const std::vector<T>& rows, const std::string& key) {
  for (const T& r : rows)
    if (r.key() == key) return &r;
  return nullptr;
}

}  // namespace gym::exporter
