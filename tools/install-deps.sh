#!/usr/bin/env bash
# Installs the Debian packages Parallax builds against, only those that are missing.
# Used by `make demo`, `make test` and CI (`--fuzz` adds clang for `make fuzz`); safe to run again.
# Needs root (or sudo).
set -euo pipefail
PACKAGES=(
  cmake g++ make ninja-build
  nlohmann-json3-dev libeigen3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  python3 python3-numpy
  chromium  # the HTML pages' test opens them in a headless browser (it skips without one)
)
if [[ "${1:-}" == "--fuzz" ]]; then PACKAGES+=(clang clang-14 libclang-rt-14-dev); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
