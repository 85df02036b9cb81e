#!/usr/bin/env bash
# The README's first command: set everything up, then run Attend's main job.
# (Until training lands, the main job is a tour of the tool: its help and what it runs on.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
build/attend --help
echo
build/attend info
