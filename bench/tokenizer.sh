#!/usr/bin/env bash
# Tokenizer benchmarks, Attend beside its peers in one run (results go in docs/BENCHMARKS.md):
#   1. GPT-2 encoding of the Brown corpus: tiktoken 1.0.22 (wasm) and gpt-3-encoder on one thread
#      (node), Attend on 1 and 2 threads, with a check that Attend's ids equal tiktoken's.
#   2. Training an 8k vocabulary on the Brown corpus: `attend tokenizer train` against SentencePiece's
#      `spm_train` (Debian package sentencepiece) on the same file and threads, BPE and Unigram.
#
#   scripts/setup.sh --with-peers && bench/tokenizer.sh [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
if [[ ${1:-} == --threads ]]; then threads=$2; fi
scripts/get-data.sh brown gpt2 tiktoken >&2
cmake --build build --target attend_cli attend_tokenizer_bench >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== GPT-2 encoding, data/brown.txt ($(wc -c <data/brown.txt) bytes)"
bench/tokenizer_peers.sh data/brown.txt --ids-out "$work/tiktoken.u32"
build/bench/attend_tokenizer_bench --tokenizer data/gpt2 --input data/brown.txt --threads "1,$threads" \
  --compare-ids "$work/tiktoken.u32"

now() { date +%s.%N; }
echo "== training an 8000-token vocabulary on data/brown.txt, $threads threads"
for kind in bpe unigram; do
  start=$(now)
  build/attend --threads "$threads" --log-level warn tokenizer train --kind "$kind" --vocab-size 8000 \
    --input data/brown.txt -o "$work/attend-$kind.json" 2>/dev/null >/dev/null
  attend_s=$(awk "BEGIN { printf \"%.2f\", $(now) - $start }")
  if command -v spm_train >/dev/null; then
    start=$(now)
    (cd "$work" && spm_train --input="$OLDPWD/data/brown.txt" --model_prefix="spm-$kind" --model_type="$kind" \
      --vocab_size=8000 --num_threads="$threads" --minloglevel=2 --input_sentence_size=100000000 >/dev/null 2>&1)
    spm_s=$(awk "BEGIN { printf \"%.2f\", $(now) - $start }")
  else
    spm_s=null
    echo "spm_train not found (apt-get install sentencepiece, or scripts/setup.sh --with-peers)" >&2
  fi
  echo "{\"train\": \"$kind\", \"vocab\": 8000, \"threads\": $threads, \"attend_s\": $attend_s, \"spm_train_s\": $spm_s}"
done
