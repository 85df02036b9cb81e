#!/usr/bin/env bash
# Installs those of the named Debian packages that are not installed yet (apt-get, with sudo when not
# root); scripts/setup.sh and fuzz/run.sh use it.
#
#   scripts/install-packages.sh WHO PACKAGE...   # WHO prefixes the messages, e.g. "setup"
set -euo pipefail
who=$1
shift
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "$who: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "$who: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
