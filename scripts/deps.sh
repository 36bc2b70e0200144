#!/usr/bin/env bash
# Installs, with apt-get, whatever of the project's Debian packages is missing.
# Safe to run again: it only calls apt-get when something is not installed.
set -euo pipefail

packages=(
  cmake make g++ pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  prometheus-cpp-dev libssl-dev libyaml-cpp-dev libspdlog-dev zlib1g-dev libzstd-dev
  prometheus openssl libcrypt-dev wrk clang libclang-rt-14-dev
  python3 python3-dev python3-setuptools python3-wheel python3-venv python3-pip python3-pytest python3-prometheus-client python3-psutil
  libncurses-dev tmux python3-jsonschema help2man dpkg-dev python3-matplotlib mypy
  valgrind python3-kubernetes python3-yaml jsonnet strace python3-zstandard curl systemd
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
