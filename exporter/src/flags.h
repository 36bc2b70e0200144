// The command line: one table of flags, from which both the parser and the
// usage text (--help) come.
//
// Thread-safety: plain values.
#pragma once

#include <string>

#include "config.h"

namespace gym::exporter {

struct Flags {
  ConfigOverrides overrides;
  std::string config_file;
  std::string web_config_file;
  bool check_config = false;
  bool once = false;
  bool help = false;
  bool version = false;
};

// Parses --name=value and --name value. False with a one-line message.
bool parse_flags(int argc, char** argv, Flags& flags, std::string& error);
// The --help text, generated from the table.
std::string usage();

}  // namespace gym::exporter
