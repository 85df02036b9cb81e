#!/usr/bin/env bash
# Makes tests/data/gpt2_tokenizer_golden.json: GPT-2 token ids from tiktoken 1.0.22 (npm; OpenAI's
# Rust tokenizer compiled to wasm) for adversarial hand-written strings, 300 seeded random strings
# and Brown corpus text. Deterministic: same tiktoken and data/brown.txt, same file.
#
#   scripts/get-data.sh brown           # data/brown.txt, once
#   tools/make_tokenizer_fixtures.sh
#
# Needs node (>= 18) and npm. tiktoken is fetched with `npm pack` into data/npm/tiktoken (no install,
# no install scripts) the first time; the helper loads its tiktoken.cjs directly.
set -euo pipefail
cd "$(dirname "$0")/.."

TIKTOKEN=tiktoken@1.0.22
dir=data/npm/tiktoken

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "make_tokenizer_fixtures: $tool is needed" >&2; exit 1; }
done
[[ -s data/brown.txt ]] || { echo "make_tokenizer_fixtures: run scripts/get-data.sh brown first" >&2; exit 1; }

if [[ ! -f $dir/tiktoken_bg.wasm ]]; then
  echo "make_tokenizer_fixtures: fetching $TIKTOKEN"
  mkdir -p data/npm
  tmp=$(mktemp -d data/npm/.fetch.XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$TIKTOKEN" >/dev/null)
  tar xzf "$tmp"/*.tgz -C "$tmp"
  rm -rf "$dir"
  mv "$tmp/package" "$dir"
fi

mkdir -p tests/data
node tools/make_tokenizer_fixtures.mjs "$dir" data/brown.txt tests/data/gpt2_tokenizer_golden.json
