#!/usr/bin/env bash
# GPT-2 BPE encoding speed of two peers, one thread each (node): tiktoken 1.0.22 (Rust core as wasm)
# on the whole file, and gpt-3-encoder 1.1.4 (plain JavaScript) on a 200 KB prefix only, as it is
# very slow (it also re-concatenates its output array per pre-token, so its time grows quadratically
# with input size; it is therefore timed line by line as well). One line of JSON each.
#
#   bench/tokenizer_peers.sh [FILE] [--ids-out PATH]
#
# FILE defaults to data/brown.txt (scripts/get-data.sh brown). --ids-out writes tiktoken's ids as
# little-endian uint32 so the C++ benchmark can check its own ids against them. Both peers are
# fetched by scripts/get-data.sh (tiktoken, gpt2).
set -euo pipefail
cd "$(dirname "$0")/.."

file=data/brown.txt
ids_out=()
while (($#)); do
  case $1 in
    --ids-out) ids_out=(--ids-out "$2"); shift 2 ;;
    --ids-out=*) ids_out=(--ids-out "${1#*=}"); shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) file=$1; shift ;;
  esac
done
[[ -s $file ]] || { echo "tokenizer_peers: $file is missing (scripts/get-data.sh brown)" >&2; exit 1; }

scripts/get-data.sh tiktoken gpt2 >&2
node bench/tokenizer_peers.mjs --peer tiktoken --repeats 3 "${ids_out[@]}" "$file"

if [[ -f data/npm/gpt-3-encoder/Encoder.js ]]; then
  # One whole-prefix run (about 20 s; the gap to tiktoken is far larger than its noise), then best of
  # 3 line by line.
  node bench/tokenizer_peers.mjs --peer gpt-3-encoder --prefix-bytes 200000 --repeats 1 --line-repeats 3 "$file"
else
  echo "tokenizer_peers: data/npm/gpt-3-encoder missing (scripts/get-data.sh gpt2); skipped" >&2
fi
