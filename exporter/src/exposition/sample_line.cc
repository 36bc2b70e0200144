#include "exposition/sample_line.h"

#include "exposition/text_classes.h"

namespace gym::exporter {

using text_classes::kClasses;
using text_classes::kEscaped;
using text_classes::kQuote;

void append_double(std::string& out, double v) {
  char buf[kNumberBytes];
  out.append(buf, write_double(buf, v));
}

void append_uint(std::string& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// HELP text escapes backslash and newline; label values also the quote.
void append_escaped(std::string& out, std::string_view s, bool quote) {
  const uint8_t mask = quote ? (kEscaped | kQuote) : kEscaped;
  size_t i = 0;
  while (i < s.size() && (kClasses[uint8_t(s[i])] & mask) == 0) ++i;
  out.append(s.data(), i);  // nearly always all of it: nothing to escape
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if ((kClasses[uint8_t(c)] & mask) == 0) {
      out += c;
      continue;
    }
    out += '\\';
    out += c == '\n' ? 'n' : c;
  }
}

namespace {
void append_value(std::string& out, const SampleLine& line) {
  if (line.count)
    append_uint(out, *line.count);
  else
    append_double(out, line.value);
}

// The name and labels of a line that is not the plain case: quoted, with a
// label of its own, or both.
void append_head(std::string& out, const SampleLine& line, const LineStyle& style) {
  size_t before;
  if (!style.quoted_name) {
    out += line.name;
    out += line.suffix;
    before = out.size();
    out += line.labels;
  } else {
    // {"name"...}: the name first inside the braces, then the labels.
    out += "{\"";
    append_escaped(out, line.name, true);
    out += line.suffix;
    out += '"';
    before = out.size() - 1;  // a brace is open
    if (!line.labels.empty()) {
      out += ',';
      out.append(line.labels, 1);
    }
  }
  if (line.extra_name != nullptr) {
    out += out.size() == before ? '{' : ',';
    out += line.extra_name;
    out += "=\"";
    out += line.extra_value;
    out += '"';
  }
  if (out.size() != before) out += '}';
}

}  // namespace

void append(std::string& out, const SampleLine& line, const LineStyle& style) {
  if (!style.quoted_name && line.extra_name == nullptr && line.timestamp_ms == 0) {
    // Nearly every line: written in place.
    const std::string_view end(line.suffix);
    InPlace text(out, line.name.size() + end.size() + line.labels.size() + 3 + kNumberBytes);
    text.put(line.name);
    text.put(end);
    if (!line.labels.empty()) {
      text.put(line.labels);
      text.put('}');
    }
    text.put(' ');
    if (line.count)
      text.uint(*line.count);
    else
      text.number(line.value);
    text.put('\n');
    return;
  }
  append_head(out, line, style);
  out += ' ';
  append_value(out, line);
  if (line.timestamp_ms != 0) {
    out += ' ';
    if (style.open_metrics)  // seconds
      append_double(out, double(line.timestamp_ms) / 1000);
    else
      out += std::to_string(line.timestamp_ms);
  }
  out += '\n';
}

}  // namespace gym::exporter
