#!/usr/bin/env bash
# Makes tests/data/gpt2_tokenizer_golden.json: GPT-2 token ids from tiktoken 1.0.22 (npm; OpenAI's
# Rust tokenizer compiled to wasm) for adversarial hand-written strings, 300 seeded random strings
# and Brown corpus text. Deterministic: same tiktoken and data/brown.txt, same file.
#
#   tools/make_tokenizer_fixtures.sh
#
# Needs node (>= 18) and npm. scripts/get-data.sh fetches tiktoken with `npm pack` into
# data/npm/tiktoken (no install, no install scripts); the helper loads its tiktoken.cjs directly.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=data/npm/tiktoken

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "make_tokenizer_fixtures: $tool is needed" >&2; exit 1; }
done
scripts/get-data.sh brown tiktoken

mkdir -p tests/data
node tools/make_tokenizer_fixtures.mjs "$dir" data/brown.txt tests/data/gpt2_tokenizer_golden.json
