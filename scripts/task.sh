#!/usr/bin/env bash
# One command per real task (issue 8; results in docs/RESULTS.md). Needs scripts/setup.sh first.
#
#   scripts/task.sh g2p [--set train.steps=N ...]   # CMUdict grapheme-to-phoneme: tokenizer, training, WER/PER
#
# Extra arguments go to `attend train`. A run continues from its checkpoint when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
task=${1:?usage: scripts/task.sh g2p [--set KEY=VALUE ...]}
shift
attend=build/attend

case $task in
  g2p)
    # Letters and the 39 stress-free phonemes are all whole WordPiece tokens (the vocabulary stays small).
    mkdir -p runs/g2p-tok
    [[ -s runs/g2p-tok/tokenizer.json ]] ||
      $attend tokenizer train --kind wordpiece --vocab-size 300 --input data/cmudict/train-39.tsv -o runs/g2p-tok/tokenizer.json
    resume=()
    [[ -d runs/g2p/checkpoint ]] && resume=(--resume)
    $attend train --config configs/g2p.json "$@" "${resume[@]}"
    $attend eval-seq2seq --model runs/g2p/checkpoint --data data/cmudict/test-39.tsv --beam 4
    ;;
  *)
    echo "scripts/task.sh: unknown task '$task' (expected g2p)" >&2
    exit 1
    ;;
esac
