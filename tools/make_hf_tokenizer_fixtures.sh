#!/usr/bin/env bash
# Makes tests/data/hf_tokenizers/NAME.json: token ids and decoded text from Hugging Face's tokenizers 0.23.2
# (npm "tokenizers": its Rust core as a node binding) for every tokenizer of data/tokenizers/ (real files of
# current models, scripts/get-data.sh tokenizers). Deterministic: same binding and files, same fixtures.
#
#   tools/make_hf_tokenizer_fixtures.sh
#
# Needs node (>= 18) and npm, on linux-x64 (the binding's tokenizers.linux-x64-gnu.node). get-data.sh
# fetches the binding with `npm pack` into data/npm/tokenizers (no install, no install scripts).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "make_hf_tokenizer_fixtures: $tool is needed" >&2; exit 1; }
done
scripts/get-data.sh brown tokenizers hf-tokenizers
node tools/make_hf_tokenizer_fixtures.mjs data/npm/tokenizers data/tokenizers data/brown.txt tests/data/hf_tokenizers
