#!/bin/bash
# Renders the mixin into the files the repository ships (or into DIR):
# dashboards/*.json, config/rules/*.yml, deploy/kubernetes/node/prometheusrule.yaml.
#   bash mixin/build.sh [DIR]
# Run it after changing anything in mixin/; a test checks the files are what
# it writes. Needs jsonnet (apt-get install jsonnet).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/..}
command -v jsonnet >/dev/null || { echo "mixin/build.sh: jsonnet not found (apt-get install jsonnet)" >&2; exit 1; }
python=/usr/bin/python3; [ -x "$python" ] || python=python3  # Debian's, with python3-yaml
mkdir -p "$out/dashboards" "$out/config/rules" "$out/deploy/kubernetes/node"
jsonnet -J "$here" "$here/build.jsonnet" | "$python" "$here/write.py" "$out"
