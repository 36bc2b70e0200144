#!/usr/bin/env bash
# The Debian package, installed for real: made with cpack from a Release
# build directory, installed with dpkg -i, checked as a user finds it (the
# programs, the configuration in /etc, the registry directory, the systemd
# unit and its reload, the man page, rules, dashboards, the library, the
# Python package), then
# upgraded over a changed configuration, removed and purged. Needs root.
#   tests/package_test.sh BUILD_DIR     (CI: after scripts/build-release.sh)
set -euo pipefail
build="$(cd "$1" && pwd)"
if [ "$(id -u)" -ne 0 ]; then
  echo "package test: SKIPPED (dpkg -i needs root)"
  exit 0
fi
if dpkg-query -W -f='${Status}' gym-exporter 2>/dev/null | grep -q "install ok installed"; then
  echo "package test: gym-exporter is installed already; not touching it" >&2
  exit 1
fi
work="$(mktemp -d)"
exporter=""
cleanup() {
  [ -z "$exporter" ] || kill "$exporter" 2>/dev/null || true
  dpkg --purge gym-exporter >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "package test: FAILED: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
deb="$(ls -t "$build"/gym-exporter_*.deb | head -1)"
info="$(dpkg-deb --info "$deb")"
grep -q '^ Depends:.*libssl3' <<<"$info" || fail "no libssl3 in Depends"
grep -q '^ Depends:.*libssl3' <<<"$info" || fail "shared library dependencies not computed"
dpkg -i "$deb" >/dev/null

[ "$(command -v gym-exporter)" = /usr/bin/gym-exporter ] || fail "gym-exporter not on PATH"
gym-exporter --version | grep -q '^gym-exporter version' || fail "--version"
for p in gym-stat gym-demo; do [ -x "/usr/bin/$p" ] || fail "no /usr/bin/$p"; done
cfg=/etc/gym-exporter/gym-exporter.yml
[ -f "$cfg" ] || fail "no $cfg"
gym-exporter --check-config --config.file="$cfg" >/dev/null || fail "the installed configuration is invalid"
[ "$(stat -c %a /dev/shm/gym-metrics)" = 1777 ] || fail "registry directory not made sticky and shared"
unit=/usr/lib/systemd/system/gym-exporter.service
grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$unit" || fail "no SIGHUP reload in $unit"
grep -q "^ExecStart=/usr/bin/gym-exporter --config.file=$cfg$" "$unit" || fail "ExecStart"
socket_unit=/usr/lib/systemd/system/gym-exporter.socket
grep -q '^ListenStream=9478$' "$socket_unit" || fail "no socket activation unit on 9478"
if command -v systemd-analyze >/dev/null 2>&1; then
  systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
  systemd-analyze verify "$socket_unit" || fail "systemd-analyze verify $socket_unit"
fi
[ -f /usr/lib/tmpfiles.d/gym-exporter.conf ] || fail "no tmpfiles.d entry"
man_page="$(zcat /usr/share/man/man1/gym-exporter.1.gz)"
grep -q 'registry.*dir' <<<"$man_page" || fail "man page without the flags"
promtool check rules /usr/share/gym-exporter/rules/*.yml >/dev/null || fail "installed rules"
[ -f /usr/share/gym-exporter/dashboards/gym-memory.json ] || fail "no dashboards"
# Rendered whole first: grep -q on a pipe exits at its match, and jsonnet's
# next write then dies of SIGPIPE, which pipefail reports (38 of 100 runs).
alerts="$(jsonnet -J /usr/share/gym-exporter/mixin -e '(import "mixin.libsonnet").prometheusAlerts')" \
  || fail "the installed mixin does not render"
grep -q GymEventLoopBlocked <<<"$alerts" || fail "the installed mixin has no GymEventLoopBlocked"
[ -f /usr/share/doc/gym-exporter/docs/metrics.md ] || fail "no metric reference"
for page in $(grep -o '(docs/[a-z]*\.md)' /usr/share/doc/gym-exporter/README.md | tr -d '()'); do
  [ -f "/usr/share/doc/gym-exporter/$page" ] || fail "the README links to $page, not installed"
done
pkg-config --exists gymmetrics || fail "pkg-config does not find libgymmetrics"
[ -f /usr/include/gym/metered_semaphore.h ] || fail "no headers"

# The Python package, for Debian's python3, from anywhere (not this tree):
# a live process's limit, read by the installed exporter.
(cd "$work" && GYM_METRICS_DIR="$work/python-registry" exec /usr/bin/python3 -c '
import time, gym_metrics
s = gym_metrics.MeteredSemaphore(3, "agent_server", "from_the_package")
print(gym_metrics.__file__, flush=True)
time.sleep(60)
' >"$work/python.out" 2>&1) &
python_pid=$!
for _ in $(seq 100); do [ -s "$work/python.out" ] && break; sleep 0.1; done
grep -q '^/usr/lib/python3/dist-packages/gym_metrics/' "$work/python.out" ||
  fail "the installed Python package: $(cat "$work/python.out")"
grep -q '^gym_concurrency_limit{.*limit_name="from_the_package".* 3$' \
  <<<"$(gym-exporter --once --registry.dir="$work/python-registry")" ||
  fail "the installed exporter does not read what the installed Python package wrote"
kill "$python_pid"
wait "$python_pid" 2>/dev/null || true

# The installed programs, as the service would run them: the demo's series,
# then a reload by SIGHUP (what systemctl reload sends).
gym-demo --registry.dir="$work/registry" --duration=2 >/dev/null 2>&1
once="$(gym-exporter --once --registry.dir="$work/registry")"
grep -q '^gym_resources_operation' <<<"$once" ||
  fail "the installed exporter does not read the demo's registry"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
gym-exporter --config.file="$cfg" --registry.dir="$work/registry" \
  --web.listen-address="127.0.0.1:$port" 2>"$work/exporter.log" &
exporter=$!
scrape() { python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=5).read().decode())"; }
for _ in $(seq 100); do scrape >/dev/null 2>&1 && break; sleep 0.1; done
kill -HUP "$exporter"
reloaded=""
for _ in $(seq 100); do
  if grep -q '^gym_exporter_config_reloads_total{result="success"} 1$' <<<"$(scrape 2>/dev/null)"; then
    reloaded=yes
    break
  fi
  sleep 0.1
done
[ -n "$reloaded" ] || fail "SIGHUP did not reload: $(cat "$work/exporter.log")"
kill "$exporter"
wait "$exporter" 2>/dev/null || true
exporter=""

# An upgrade keeps the administrator's configuration; remove keeps it too,
# purge removes it.
echo "# changed by the administrator" >>"$cfg"
dpkg -i "$deb" >/dev/null
grep -q '^# changed by the administrator$' "$cfg" || fail "an upgrade overwrote $cfg"
dpkg -r gym-exporter >/dev/null
[ ! -e /usr/bin/gym-exporter ] || fail "remove left /usr/bin/gym-exporter"
[ -f "$cfg" ] || fail "remove took the configuration"
dpkg --purge gym-exporter >/dev/null
[ ! -e /etc/gym-exporter ] || fail "purge left /etc/gym-exporter"
echo "package test: OK ($(basename "$deb"))"
