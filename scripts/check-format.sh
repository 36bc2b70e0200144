#!/usr/bin/env bash
# Fails (and names the files) when any C or C++ source differs from
# .clang-format, or any jsonnet file from jsonnetfmt. Installs either when
# it is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { apt-get update -qq && apt-get install -y -qq clang-format; }
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done < <(git ls-files '*.cc' '*.h' '*.c' | grep -v '^fuzz/corpus/')
[ $bad -eq 0 ] && echo "clang-format: every file is formatted"
# The mixin's jsonnet, with jsonnetfmt (Debian's jsonnet package).
command -v jsonnetfmt >/dev/null || { apt-get update -qq && apt-get install -y -qq jsonnet; }
while IFS= read -r f; do
  if ! jsonnetfmt --test "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: jsonnetfmt -i $f)"
    bad=1
  fi
done < <(git ls-files '*.jsonnet' '*.libsonnet')
exit $bad
