#!/usr/bin/env bash
# One command per real task (issue 8; results in docs/RESULTS.md). Needs scripts/setup.sh first.
#
#   scripts/task.sh g2p [--set train.steps=N ...]   # CMUdict grapheme-to-phoneme: tokenizer, training, WER/PER
#   scripts/task.sh spam [--set train.steps=N ...]  # SpamAssassin: tokenizer, MLM pre-training, classifier,
#                                                   # accuracy/precision/recall/F1 and ECE on the test split
#
# Extra arguments go to `attend train` (spam: to the classifier's). A run continues from its checkpoint when
# there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
task=${1:?usage: scripts/task.sh g2p|spam [--set KEY=VALUE ...]}
shift
attend=${ATTEND:-build/attend}  # ATTEND=path runs another binary (a copy, while build/ is rebuilt)

case $task in
  g2p)
    # Letters and the 39 stress-free phonemes are all whole WordPiece tokens (the vocabulary stays small).
    mkdir -p runs/g2p-tok
    [[ -s runs/g2p-tok/tokenizer.json ]] ||
      $attend tokenizer train --kind wordpiece --vocab-size 300 --input data/cmudict/train-39.tsv -o runs/g2p-tok/tokenizer.json
    resume=()
    [[ -d runs/g2p/checkpoint ]] && resume=(--resume)
    $attend train --config configs/g2p.json "$@" "${resume[@]}"
    $attend eval-seq2seq --model runs/g2p/checkpoint --data data/cmudict/test-39.tsv --beam 8
    ;;
  spam)
    # The messages' text alone (no labels), one document each, for the tokenizer and MLM pre-training.
    mkdir -p runs/spam-text runs/spam-tok
    for split in train valid; do
      [[ -s runs/spam-text/$split.txt ]] ||
        { cut -f2- data/spam/$split.tsv | sed 's/$/\n/' >runs/spam-text/$split.txt.tmp &&
          mv runs/spam-text/$split.txt.tmp runs/spam-text/$split.txt; }
    done
    [[ -s runs/spam-tok/tokenizer.json ]] ||
      $attend tokenizer train --kind wordpiece --vocab-size 8000 --lowercase --input runs/spam-text/train.txt \
        -o runs/spam-tok/tokenizer.json
    if [[ ! -d runs/spam/checkpoint ]]; then  # pre-training first (continued if it was interrupted)
      resume=()
      [[ -d runs/spam-mlm/checkpoint ]] && resume=(--resume)
      $attend train --config configs/spam-mlm.json "${resume[@]}"
    fi
    resume=()
    [[ -d runs/spam/checkpoint ]] && resume=(--resume)
    $attend train --config configs/spam.json "$@" "${resume[@]}"
    $attend eval-classify --model runs/spam/checkpoint --data data/spam/test.tsv --positive spam --calibrate \
      --reliability runs/spam/reliability.svg
    ;;
  *)
    echo "scripts/task.sh: unknown task '$task' (expected g2p or spam)" >&2
    exit 1
    ;;
esac
